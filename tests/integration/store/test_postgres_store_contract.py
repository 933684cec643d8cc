"""The event log's contract on PostgreSQL's store (a fresh database per test): the tests the
in-memory store passes too (``tests/fast/adapters/test_memory_store_contract.py``), from
``store_contract``, ``snapshot_contract`` and ``leadership_contract``."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from leadership_contract import *  # noqa: F403  (the contract's tests)
from snapshot_contract import *  # noqa: F403  (the contract's tests)
from store_backends import Backend, postgres
from store_contract import *  # noqa: F403  (the contract's tests)


@pytest.fixture
async def backend(database_url: str) -> AsyncIterator[Backend]:
    """PostgreSQL alone (this folder's conftest also runs the decision contract in memory)."""
    store, running = postgres(database_url)
    yield running
    await store.close()
