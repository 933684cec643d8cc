"""What only the PostgreSQL event store does: the append-only trigger, COPY, and a cache that can go stale.

The behaviour every store shares (positions, versions, idempotency, reads, replay, the
hash chain, checkpoints) is the contract in tests/integration/store/test_contract.py, which runs on
PostgreSQL too.
"""

from __future__ import annotations

from datetime import UTC, datetime

import psycopg
import pytest

from nrt.adapters.infra.pgurl import to_libpq
from nrt.adapters.store import EventStore
from nrt.core.eventlog import Checkpoint, ConcurrencyError
from nrt.core.events import TierChanged
from nrt.testing.traffic import traffic

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def _tier(model: str, to: str, at: datetime = T0) -> TierChanged:
    return TierChanged(
        occurred_at=at,
        model_id=model,
        worker_id="w1",
        from_tier="standby",
        to_tier=to,
        reason="command",
        elapsed_ms=1.0,
        bytes_held=10,
    )


async def test_the_log_is_append_only(event_store: EventStore, database_url: str) -> None:
    await event_store.append([_tier("a", "resident")])
    with psycopg.connect(to_libpq(database_url), autocommit=True) as conn:
        with pytest.raises(psycopg.errors.RaiseException, match="append-only: UPDATE"):
            conn.execute("UPDATE events SET type = 'X'")
        with pytest.raises(psycopg.errors.RaiseException, match="append-only: DELETE"):
            conn.execute("DELETE FROM events")


async def test_a_second_writer_is_caught_by_the_constraints_not_by_luck(database_url: str) -> None:
    """Two stores with their own caches: each stale guess is rejected and redone correctly."""
    one, two = EventStore.connect(database_url), EventStore.connect(database_url)
    try:
        await one.append([_tier("a", "resident")])
        await two.append([_tier("a", "standby"), _tier("b", "resident")])  # one's cache is now stale
        shared = _tier("c", "resident")
        await two.append([shared])
        result = await one.append([_tier("a", "resident"), shared])  # stale tail, stale version, a duplicate
        assert [(r.position, r.stream_id, r.stream_version) for r in result.recorded] == [(5, "model:a", 3)]
        assert result.duplicates == 1
        with pytest.raises(
            ConcurrencyError, match="stream 'model:b' is at version 2, but the append expected version 1"
        ):
            await _move_b_then_expect_old(one, two)
        report = await one.verify()
        assert report.ok
        assert report.checked == await one.head()
    finally:
        await one.close()
        await two.close()


async def _move_b_then_expect_old(one: EventStore, two: EventStore) -> None:
    await one.append([_tier("b", "standby")])  # b is at version 2 now; two still believes 1
    await two.append([_tier("b", "resident")], expected_versions={"model:b": 1})


async def test_a_stale_cache_does_not_refuse_the_right_expectation(database_url: str) -> None:
    """The cache believes an old version: an append that expects the real one is stored, not refused."""
    one, two = EventStore.connect(database_url), EventStore.connect(database_url)
    try:
        await one.append([_tier("a", "resident")])  # one's cache: model:a at 1
        await two.append([_tier("a", "standby")])  # model:a at 2
        result = await one.append([_tier("a", "resident")], expected_versions={"model:a": 2})
        assert [(r.position, r.stream_version) for r in result.recorded] == [(3, 3)]
        assert (await one.verify()).ok
    finally:
        await one.close()
        await two.close()


async def test_the_checked_path_commits_the_checkpoint_with_the_events(event_store: EventStore) -> None:
    """A store without a cached tail (a fresh process) checks everything in the database, checkpoint included."""
    events = list(traffic(30, seed=11))
    await event_store.append(events[:10], checkpoint=Checkpoint(consumer="c", sequence=10))
    fresh_store = EventStore(event_store.engine)  # no cached tail: the checked path
    result = await fresh_store.append(events[5:20], checkpoint=Checkpoint(consumer="c", sequence=20))
    assert (len(result.recorded), result.duplicates) == (10, 5)
    assert await event_store.checkpoint("c") == 20
    again = EventStore(event_store.engine)
    result = await again.append(events[:20], checkpoint=Checkpoint(consumer="c", sequence=21))
    assert (len(result.recorded), result.duplicates) == (0, 20)
    assert await event_store.checkpoint("c") == 21
    assert (await event_store.verify()).checked == 20
