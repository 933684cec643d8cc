"""The PostgreSQL event store: ordering, idempotency, optimistic concurrency, the hash chain."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from nrt.events import ManifestApplied, TierChanged, WorkerJoined, WorkerLost
from nrt.infra.pgurl import to_libpq
from nrt.state import fold
from nrt.store import ConcurrencyError, EventStore
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


async def test_append_assigns_positions_and_stream_versions(event_store: EventStore) -> None:
    result = await event_store.append([_tier("a", "resident"), _tier("b", "resident"), _tier("a", "standby")])
    assert [(r.position, r.stream_id, r.stream_version) for r in result.recorded] == [
        (1, "model:a", 1),
        (2, "model:b", 1),
        (3, "model:a", 2),
    ]
    assert result.head == 3
    stream = await event_store.read_stream("model:a")
    assert [r.stream_version for r in stream] == [1, 2]
    assert stream[1].event == result.recorded[2].event
    assert stream[0].recorded_at is not None
    assert await event_store.stream_version("model:a") == 2
    assert await event_store.stream_version("model:none") == 0


async def test_conflicting_version_fails_and_stores_nothing(event_store: EventStore) -> None:
    await event_store.append([_tier("a", "resident")], expected_versions={"model:a": 0})
    with pytest.raises(ConcurrencyError, match="stream 'model:a' is at version 1, but the append expected version 0"):
        await event_store.append([_tier("a", "standby"), _tier("b", "resident")], expected_versions={"model:a": 0})
    assert await event_store.head() == 1
    await event_store.append([_tier("a", "standby")], expected_versions={"model:a": 1})
    assert await event_store.stream_version("model:a") == 2


async def test_same_event_twice_is_stored_once(event_store: EventStore) -> None:
    event = _tier("a", "resident")
    first = await event_store.append([event])
    again = await event_store.append([event])
    assert len(first.recorded) == 1
    assert again.recorded == []
    assert again.duplicates == 1
    batch = list(traffic(50))
    await event_store.append(batch)
    replay = await event_store.append([*batch, event, batch[3]])  # a re-delivered batch
    assert replay.recorded == []
    assert replay.duplicates == 52
    assert await event_store.head() == 51


async def test_concurrent_appenders_get_gapless_positions_and_one_chain(event_store: EventStore) -> None:
    batches = [list(traffic(200, seed=s)) for s in range(6)]
    await asyncio.gather(*(event_store.append(b) for b in batches))
    positions = [r.position async for r in event_store.read_positions()]
    assert positions == list(range(1, 1201))
    assert (await event_store.verify()).ok


async def test_reads_by_position_range_time_type_and_stream(event_store: EventStore) -> None:
    events = [
        WorkerJoined(occurred_at=T0, worker_id="w1", host="h", cpu_count=2, ram_bytes=1),
        _tier("a", "resident", T0 + timedelta(minutes=1)),
        _tier("b", "resident", T0 + timedelta(minutes=2)),
        WorkerLost(occurred_at=T0 + timedelta(minutes=3), worker_id="w1", reason="shutdown"),
    ]
    await event_store.append(events)
    middle = [r.position async for r in event_store.read_positions(2, 3)]
    assert middle == [2, 3]
    paged = [r.position async for r in event_store.read_positions(page=3)]
    assert paged == [1, 2, 3, 4]
    tiers = await event_store.query(types=["TierChanged"])
    assert [r.event for r in tiers] == events[1:3]
    workers = await event_store.query(stream_prefix="worker:")
    assert [r.position for r in workers] == [1, 4]
    window = await event_store.query(since=T0 + timedelta(seconds=30), until=T0 + timedelta(minutes=2))
    assert [r.position for r in window] == [2, 3]
    assert await event_store.position_at(T0 + timedelta(minutes=2, seconds=1)) == 3
    assert await event_store.position_at(T0 - timedelta(days=1)) == 0


async def test_replayed_log_folds_to_the_same_state(event_store: EventStore) -> None:
    events = list(traffic(3_000))
    for i in range(0, len(events), 700):
        await event_store.append(events[i : i + 700])
    stored = [r.event async for r in event_store.read_positions()]
    assert fold(stored) == fold(events)


async def test_text_with_copy_special_characters_round_trips(event_store: EventStore) -> None:
    text = 'cluster: "a\\tb"\n\ttabbed\r\nback\\slash ünï ☃ \\N \\.\n'
    event = ManifestApplied(version=1, cluster="c\\N", digest="d", text=text)
    await event_store.append([event])
    [stored] = await event_store.read_stream("manifest")
    assert stored.event == event
    assert (await event_store.verify()).ok


def _tamper(database_url: str, sql: str) -> None:
    """What a superuser could do behind the store's back: bypass the append-only trigger."""
    with psycopg.connect(to_libpq(database_url), autocommit=True) as conn:
        conn.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
        conn.execute(sql)
        conn.execute("ALTER TABLE events ENABLE TRIGGER events_append_only")


async def test_verify_names_the_edited_row(event_store: EventStore, database_url: str) -> None:
    await event_store.append(list(traffic(500)))
    assert (await event_store.verify()).render() == "hash chain intact: 500 events verified"
    _tamper(
        database_url,
        "UPDATE events SET body = jsonb_set(body::jsonb, '{reason}', '\"forged\"')::json WHERE position = 137",
    )
    report = await event_store.verify(page=50)
    assert not report.ok
    assert report.first_bad_position == 137
    assert report.checked == 136
    assert "position 137" in report.render()
    assert "content does not match its hash" in report.render()


async def test_verify_names_a_deleted_row(event_store: EventStore, database_url: str) -> None:
    await event_store.append(list(traffic(100)))
    _tamper(database_url, "DELETE FROM events WHERE position = 42")
    report = await event_store.verify()
    assert report.first_bad_position == 42
    assert "row 42 is missing" in report.render()


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


async def test_replay_yields_positions_and_events_from_one_snapshot(event_store: EventStore) -> None:
    events = list(traffic(25, seed=7))
    await event_store.append(events)
    replayed = [(p, e) async for p, e in event_store.replay(page=4)]
    assert replayed == [(i + 1, e) for i, e in enumerate(events)]
    assert [p async for p, _ in event_store.replay(5, 9, page=2)] == [5, 6, 7, 8, 9]
    assert fold(e for _, e in replayed) == fold(events)
    # a replay to the head sees the log as it was when it began, not events appended meanwhile
    seen = []
    async for position, _ in event_store.replay(page=5):
        if position == 1:
            await event_store.append(list(traffic(3, seed=8)))
        seen.append(position)
    assert seen == list(range(1, 26))
    assert await event_store.head() == 28
