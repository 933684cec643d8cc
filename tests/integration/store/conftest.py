"""Every event store behind ``nrt.core.eventlog.EventLog`` here: PostgreSQL (a fresh database), and in
memory too for the decision contract (the in-memory store's run of the log's contract is in tests/fast)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from nrt.core.eventlog import EventLog
from store_backends import Backend, memory, postgres


@pytest.fixture(params=["memory", "postgres"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    if request.param == "memory":
        yield memory()
        return
    store, backend = postgres(request.getfixturevalue("database_url"))
    yield backend
    await store.close()


@pytest.fixture
def log(backend: Backend) -> EventLog:
    return backend.log
