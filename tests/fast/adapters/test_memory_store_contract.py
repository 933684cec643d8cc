"""The event log's contract on the in-memory store: the tests PostgreSQL's store passes too
(``tests/integration/store/test_postgres_store_contract.py``), from ``store_contract``,
``snapshot_contract`` and ``leadership_contract``."""

from __future__ import annotations

import pytest

from leadership_contract import *  # noqa: F403  (the contract's tests)
from nrt.core.eventlog import EventLog
from snapshot_contract import *  # noqa: F403  (the contract's tests)
from store_backends import Backend, memory
from store_contract import *  # noqa: F403  (the contract's tests)


@pytest.fixture
def backend() -> Backend:
    return memory()


@pytest.fixture
def log(backend: Backend) -> EventLog:
    return backend.log
