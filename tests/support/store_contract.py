"""The event log's contract, run against every store: PostgreSQL and in memory.

Ordering, stream versions, optimistic concurrency, idempotency, reads, replay, the hash
chain and consumer checkpoints behave the same whichever store holds the log.
PostgreSQL-only behaviour (the append-only trigger, COPY, a second writer's stale cache)
is in tests/integration/store/test_event_store.py.

The tests run from the files that import them with a ``backend`` fixture:
``tests/fast/adapters/test_memory_store_contract.py`` (in memory) and
``tests/integration/store/test_postgres_store_contract.py`` (PostgreSQL).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import cast

import pytest

from nrt.core.eventlog import Checkpoint, ConcurrencyError, EventLog, ReplayedEvent
from nrt.core.events import ManifestApplied, TierChanged, WorkerJoined, WorkerLost
from nrt.core.state import fold
from nrt.testing.traffic import traffic
from store_backends import Backend

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


# -- append ------------------------------------------------------------------------------


async def test_append_assigns_positions_and_stream_versions(log: EventLog) -> None:
    assert await log.head() == 0
    result = await log.append([_tier("a", "resident"), _tier("b", "resident"), _tier("a", "standby")])
    assert [(r.position, r.stream_id, r.stream_version) for r in result.recorded] == [
        (1, "model:a", 1),
        (2, "model:b", 1),
        (3, "model:a", 2),
    ]
    assert result.head == 3
    assert result.duplicates == 0
    stream = await log.read_stream("model:a")
    assert [r.stream_version for r in stream] == [1, 2]
    assert stream[1].event == result.recorded[2].event
    assert stream[0].recorded_at is not None
    assert [r.position for r in await log.read_stream("model:a", from_version=2)] == [3]
    assert await log.read_stream("model:none") == []
    assert await log.stream_version("model:a") == 2
    assert await log.stream_version("model:none") == 0


async def test_an_empty_append_changes_nothing(log: EventLog) -> None:
    await log.append([_tier("a", "resident")])
    result = await log.append([])
    assert (result.recorded, result.duplicates, result.head) == ([], 0, 1)


async def test_conflicting_version_fails_and_stores_nothing(log: EventLog) -> None:
    await log.append([_tier("a", "resident")], expected_versions={"model:a": 0})
    with pytest.raises(ConcurrencyError, match="stream 'model:a' is at version 1, but the append expected version 0"):
        await log.append([_tier("a", "standby"), _tier("b", "resident")], expected_versions={"model:a": 0})
    assert await log.head() == 1
    assert await log.stream_version("model:b") == 0
    await log.append([_tier("a", "standby")], expected_versions={"model:a": 1})
    assert await log.stream_version("model:a") == 2


async def test_the_concurrency_error_names_the_stream_and_both_versions(log: EventLog) -> None:
    await log.append([_tier("a", "resident"), _tier("a", "standby")])
    with pytest.raises(ConcurrencyError) as caught:
        await log.append([_tier("a", "resident")], expected_versions={"model:a": 1})
    assert (caught.value.stream_id, caught.value.expected, caught.value.actual) == ("model:a", 1, 2)
    assert "re-read the stream and retry" in str(caught.value)


async def test_an_expectation_binds_only_streams_the_batch_adds_to(log: EventLog) -> None:
    """A stale expectation about a stream the batch adds nothing to (absent, or only duplicates) is no conflict:
    re-delivering an already recorded batch stays a no-op."""
    first = _tier("a", "resident")
    await log.append([first, _tier("a", "standby")])
    redelivered = await log.append([first], expected_versions={"model:a": 0})
    assert (redelivered.recorded, redelivered.duplicates) == ([], 1)
    other = await log.append([_tier("b", "resident")], expected_versions={"model:a": 0})
    assert [r.stream_id for r in other.recorded] == ["model:b"]
    assert await log.head() == 3


async def test_same_event_twice_is_stored_once(log: EventLog) -> None:
    event = _tier("a", "resident")
    first = await log.append([event])
    again = await log.append([event])
    assert len(first.recorded) == 1
    assert again.recorded == []
    assert again.duplicates == 1
    assert again.head == 1
    batch = list(traffic(50))
    await log.append(batch)
    replay = await log.append([*batch, event, batch[3]])  # a re-delivered batch
    assert replay.recorded == []
    assert replay.duplicates == 52
    assert await log.head() == 51


async def test_an_id_repeated_within_a_batch_keeps_its_first_occurrence(log: EventLog) -> None:
    first = _tier("a", "resident")
    imposter = TierChanged(**{**{f: getattr(first, f) for f in first.__struct_fields__}, "to_tier": "standby"})
    result = await log.append([first, _tier("b", "resident"), imposter])
    assert [r.event for r in result.recorded] == [first, result.recorded[1].event]
    assert result.duplicates == 1
    assert [r.event for r in await log.read_stream("model:a")] == [first]


async def test_concurrent_appenders_get_gapless_positions_and_one_chain(log: EventLog) -> None:
    batches = [list(traffic(200, seed=s)) for s in range(6)]
    await asyncio.gather(*(log.append(b) for b in batches))
    positions = [r.position async for r in log.read_positions()]
    assert positions == list(range(1, 1201))
    assert (await log.verify()).ok


# -- reads -------------------------------------------------------------------------------


async def test_reads_by_position_range_time_type_and_stream(log: EventLog) -> None:
    events = [
        WorkerJoined(occurred_at=T0, worker_id="w1", host="h", cpu_count=2, ram_bytes=1),
        _tier("a", "resident", T0 + timedelta(minutes=1)),
        _tier("b", "resident", T0 + timedelta(minutes=2)),
        WorkerLost(occurred_at=T0 + timedelta(minutes=3), worker_id="w1", reason="shutdown"),
    ]
    await log.append(events)
    middle = [r.position async for r in log.read_positions(2, 3)]
    assert middle == [2, 3]
    paged = [r.position async for r in log.read_positions(page=3)]
    assert paged == [1, 2, 3, 4]
    assert [r.event async for r in log.read_positions()] == events
    tiers = await log.query(types=["TierChanged"])
    assert [r.event for r in tiers] == events[1:3]
    workers = await log.query(stream_prefix="worker:")
    assert [r.position for r in workers] == [1, 4]
    assert [r.position for r in await log.query(stream_id="model:b")] == [3]
    window = await log.query(since=T0 + timedelta(seconds=30), until=T0 + timedelta(minutes=2))
    assert [r.position for r in window] == [2, 3]
    both = await log.query(types=["TierChanged", "WorkerLost"], stream_prefix="worker:")
    assert [r.position for r in both] == [4]
    assert await log.position_at(T0 + timedelta(minutes=2, seconds=1)) == 3
    assert await log.position_at(T0 + timedelta(minutes=2)) == 3
    assert await log.position_at(T0 - timedelta(days=1)) == 0


async def test_query_pages_by_position(log: EventLog) -> None:
    await log.append(list(traffic(40, seed=3)))
    pages, after = [], 0
    while page := await log.query(after_position=after, limit=15):
        pages.append([r.position for r in page])
        after = page[-1].position
    assert pages == [list(range(1, 16)), list(range(16, 31)), list(range(31, 41))]


async def test_a_prefix_is_literal_not_a_pattern(log: EventLog) -> None:
    await log.append([_tier("a_b", "resident"), _tier("axb", "resident"), _tier("a%", "resident")])
    assert [r.stream_id for r in await log.query(stream_prefix="model:a_")] == ["model:a_b"]
    assert [r.stream_id for r in await log.query(stream_prefix="model:a%")] == ["model:a%"]


async def test_text_with_copy_special_characters_round_trips(log: EventLog) -> None:
    text = 'cluster: "a\\tb"\n\ttabbed\r\nback\\slash ünï ☃ \\N \\.\n'
    event = ManifestApplied(version=1, cluster="c\\N", digest="d", text=text)
    await log.append([event])
    [stored] = await log.read_stream("manifest")
    assert stored.event == event
    assert (await log.verify()).ok


# -- replay ------------------------------------------------------------------------------


async def test_replayed_log_folds_to_the_same_state(log: EventLog) -> None:
    events = list(traffic(3_000))
    for i in range(0, len(events), 700):
        await log.append(events[i : i + 700])
    stored = [r.event async for r in log.read_positions()]
    assert fold(stored) == fold(events)


async def test_replay_yields_positions_and_events_from_one_snapshot(log: EventLog) -> None:
    events = list(traffic(25, seed=7))
    await log.append(events)
    replayed = [(p, e) async for p, e in log.replay(page=4)]
    assert replayed == [(i + 1, e) for i, e in enumerate(events)]
    assert [p async for p, _ in log.replay(5, 9, page=2)] == [5, 6, 7, 8, 9]
    assert [p async for p, _ in log.replay(24, 100)] == [24, 25]
    assert fold(e for _, e in replayed) == fold(events)
    # a replay to the head sees the log as it was when it began, not events appended meanwhile
    seen = []
    async for position, _ in log.replay(page=5):
        if position == 1:
            await log.append(list(traffic(3, seed=8)))
        seen.append(position)
    assert seen == list(range(1, 26))
    assert await log.head() == 28


async def test_a_replay_stopped_early_leaves_the_log_readable(log: EventLog) -> None:
    """A reader that stops mid-page (the next page already asked for) closes its replay cleanly."""
    events = list(traffic(40, seed=9))
    await log.append(events)
    for _ in range(3):  # more than the pool's connections: each one comes back usable
        replay = cast(AsyncGenerator[ReplayedEvent], log.replay(page=8))
        taken = [p async for p, _ in _first(replay, 11)]
        await replay.aclose()
        assert taken == list(range(1, 12))
    assert [p async for p, _ in log.replay(38)] == [38, 39, 40]
    assert await log.head() == 40


async def _first(replay: AsyncIterator[ReplayedEvent], n: int) -> AsyncIterator[ReplayedEvent]:
    async for item in replay:
        yield item
        n -= 1
        if n == 0:
            return


async def test_an_empty_log_replays_nothing(log: EventLog) -> None:
    assert [p async for p, _ in log.replay()] == []
    assert [r async for r in log.read_positions()] == []
    assert await log.query() == []


# -- the hash chain ----------------------------------------------------------------------


async def test_verify_names_the_edited_row(backend: Backend) -> None:
    log = backend.log
    await log.append(list(traffic(500)))
    assert (await log.verify()).render() == "hash chain intact: 500 events verified"
    backend.edit_field(137, "reason", "forged")
    report = await log.verify(page=50)
    assert not report.ok
    assert report.first_bad_position == 137
    assert report.checked == 136
    assert "position 137" in report.render()
    assert "content does not match its hash" in report.render()


async def test_verify_names_a_deleted_row(backend: Backend) -> None:
    log = backend.log
    events = list(traffic(100))
    await log.append(events)
    backend.delete_row(42)
    report = await log.verify()
    assert report.first_bad_position == 42
    assert report.checked == 41
    assert report.event_id == events[42].event_id  # the row found in its place
    assert "row 42 is missing" in report.render()


async def test_an_empty_log_verifies(log: EventLog) -> None:
    assert (await log.verify()).render() == "hash chain intact: 0 events verified"


# -- consumer checkpoints ----------------------------------------------------------------


async def test_the_checkpoint_commits_with_the_events(log: EventLog) -> None:
    events = list(traffic(30, seed=11))
    assert await log.checkpoint("c") == 0
    await log.append(events[:10], checkpoint=Checkpoint(consumer="c", sequence=10))
    assert await log.checkpoint("c") == 10
    # a redelivered batch: nothing new is stored, the checkpoint still moves
    result = await log.append(events[:10], checkpoint=Checkpoint(consumer="c", sequence=12))
    assert (len(result.recorded), result.duplicates) == (0, 10)
    assert await log.checkpoint("c") == 12
    result = await log.append(events[5:20], checkpoint=Checkpoint(consumer="c", sequence=20))
    assert (len(result.recorded), result.duplicates) == (10, 5)
    assert await log.checkpoint("c") == 20
    assert await log.checkpoint("other") == 0
    await log.save_checkpoint(Checkpoint(consumer="other", sequence=3))
    assert await log.checkpoint("other") == 3
    assert await log.checkpoint("c") == 20


async def test_a_failed_append_leaves_the_checkpoint_where_it_was(log: EventLog) -> None:
    events = list(traffic(10, seed=12))
    await log.append(events[:5], checkpoint=Checkpoint(consumer="c", sequence=5))
    with pytest.raises(ConcurrencyError):
        await log.append(
            events[5:], expected_versions={events[5].stream_id: 99}, checkpoint=Checkpoint(consumer="c", sequence=10)
        )
    assert await log.checkpoint("c") == 5
    assert await log.head() == 5
