"""The event stores: ``InMemoryEventStore`` (this process) and PostgreSQL's ``EventStore``.

Both implement ``nrt.core.eventlog.EventLog``. The in-memory store imports no database code.
PostgreSQL's store and the migrations (SQLAlchemy, psycopg, alembic) load on first use of their
names (``LAZY``, read by ``__getattr__``), so importing this package stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from nrt.adapters.store.memory import InMemoryEventStore

if TYPE_CHECKING:
    from nrt.adapters.store.migrate import upgrade
    from nrt.adapters.store.postgres import EventStore

# name -> the module that defines it, imported when the name is first read
LAZY = {"EventStore": "nrt.adapters.store.postgres", "upgrade": "nrt.adapters.store.migrate"}


def __getattr__(name: str) -> Any:
    if name not in LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(LAZY[name]), name)
    globals()[name] = value
    return value


__all__ = ["EventStore", "InMemoryEventStore", "upgrade"]
