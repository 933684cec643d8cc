"""The event store: the ``EventLog`` interface, PostgreSQL's ``EventStore`` and ``InMemoryEventStore``.

The interface, the records and the in-memory store import no database code. PostgreSQL's store
and the migrations (SQLAlchemy, psycopg, alembic) load on first use of their names (``LAZY``, read
by ``__getattr__``), so ``nrt.store.memory`` and what reads the ``EventLog`` stay light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from nrt.store.decisions import Decide, DecidedAppend, DecisionLog, Decisions, OutboxEntry
from nrt.store.interface import EventLog
from nrt.store.memory import InMemoryEventStore
from nrt.store.records import (
    AppendResult,
    ChainReport,
    ChainRow,
    Checkpoint,
    ConcurrencyError,
    RecordedEvent,
    ReplayedEvent,
    Snapshot,
)

if TYPE_CHECKING:
    from nrt.store.event_store import EventStore
    from nrt.store.migrate import upgrade

# name -> the module that defines it, imported when the name is first read
LAZY = {"EventStore": "nrt.store.event_store", "upgrade": "nrt.store.migrate"}


def __getattr__(name: str) -> Any:
    if name not in LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(LAZY[name]), name)
    globals()[name] = value
    return value


__all__ = [
    "AppendResult",
    "ChainReport",
    "ChainRow",
    "Checkpoint",
    "ConcurrencyError",
    "Decide",
    "DecidedAppend",
    "DecisionLog",
    "Decisions",
    "EventLog",
    "EventStore",
    "InMemoryEventStore",
    "OutboxEntry",
    "RecordedEvent",
    "ReplayedEvent",
    "Snapshot",
    "upgrade",
]
