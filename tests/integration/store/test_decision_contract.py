"""``DecisionLog``: causes, the decisions derived from them and the checkpoint are appended at once, on every store."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from nrt.adapters.store import EventStore, InMemoryEventStore
from nrt.core.eventlog import Checkpoint, ConcurrencyError, DecisionLog, Decisions, EventLog, RecordedEvent
from nrt.core.events import TierChanged, WorkerJoined, WorkerLost, encode
from nrt.core.vocabulary import Reason, Tier

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _decision_log(log: EventLog) -> DecisionLog:
    assert isinstance(log, EventStore | InMemoryEventStore)
    return log


def joined(worker_id: str) -> WorkerJoined:
    return WorkerJoined(occurred_at=T0, worker_id=worker_id, host="h", cpu_count=1, ram_bytes=1)


def lost_for_each_join(recorded: list[RecordedEvent]) -> Decisions:
    """A decider: a WorkerLost for each WorkerJoined it sees (and nothing for its own decisions)."""
    decided = [
        WorkerLost(occurred_at=T0, worker_id=r.event.worker_id, reason=Reason.SHUTDOWN)
        for r in recorded
        if isinstance(r.event, WorkerJoined)
    ]
    return Decisions(decided, recorded[-1].position if recorded else 0)


async def test_decisions_are_appended_with_their_cause_and_the_checkpoint(log: EventLog) -> None:
    store = _decision_log(log)
    result = await store.append_decided(
        [joined("w1"), joined("w2")], lost_for_each_join, Checkpoint(consumer="c", sequence=7)
    )
    assert [r.position for r in result.causes.recorded] == [1, 2]
    assert [(r.position, r.event.type, r.stream_version) for r in result.decided] == [
        (3, "WorkerLost", 2),
        (4, "WorkerLost", 2),
    ]
    assert await store.checkpoint("c") == 7
    outbox = await store.unpublished()
    assert [(o.position, o.event_id, o.type, o.schema_version) for o in outbox] == [
        (r.position, r.event.event_id, "WorkerLost", 1) for r in result.decided
    ]
    assert [o.body for o in outbox] == [encode(r.event) for r in result.decided]  # the stored bytes
    await store.mark_published([3])
    assert [o.position for o in await store.unpublished()] == [4]
    again = await store.append_decided(
        [result.causes.recorded[0].event], lost_for_each_join
    )  # a redelivered cause: nothing new
    assert (again.causes.duplicates, again.decided) == (1, [])
    assert (await store.verify()).ok


async def test_a_failing_decider_stores_nothing(log: EventLog) -> None:
    store = _decision_log(log)
    await store.append([joined("w0")])

    def broken(recorded: list[RecordedEvent]) -> Decisions:
        raise ValueError("the decider failed")

    with pytest.raises(ValueError, match="the decider failed"):
        await store.append_decided([joined("w1")], broken, Checkpoint(consumer="c", sequence=3))
    assert await store.head() == 1
    assert await store.checkpoint("c") == 0
    assert await store.unpublished() == []
    assert [r.event.type for r in (await store.append_decided([joined("w1")], lost_for_each_join)).recorded] == [
        "WorkerJoined",
        "WorkerLost",
    ]


async def test_a_decision_on_a_stream_that_moved_on_is_refused(log: EventLog) -> None:
    store = _decision_log(log)
    await store.append([joined("w1")])
    seen = await store.head()  # the decider folded this far...
    await store.append(
        [
            TierChanged(
                occurred_at=T0,
                model_id="m",
                worker_id="w1",
                from_tier=Tier.UNLOADED,
                to_tier=Tier.RESIDENT,
                reason=Reason.PLACEMENT,
                elapsed_ms=1.0,
                bytes_held=1,
            ),
            WorkerLost(occurred_at=T0, worker_id="w1", reason=Reason.HEARTBEAT_TIMEOUT),
        ]
    )  # ...then w1's stream moved on

    def stale(recorded: list[RecordedEvent]) -> Decisions:
        return Decisions(
            [WorkerLost(occurred_at=T0, worker_id="w1", reason=Reason.SHUTDOWN)] if not recorded else [], seen
        )

    with pytest.raises(ConcurrencyError, match="worker:w1"):
        await store.append_decided([], stale)
    assert await store.head() == 3
    assert await store.unpublished() == []


async def test_a_round_reads_its_streams_versions_once(database_url: str) -> None:
    """PostgreSQL: a round of decisions reads its streams' versions (as the decider saw them, and
    now) in one statement, not once for the expected versions and again for the append."""
    store = EventStore.connect(database_url)
    statements: list[str] = []

    def executed(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        statements.append(statement)

    sa.event.listen(store.engine.sync_engine, "before_cursor_execute", executed)
    try:
        result = await store.append_decided([joined("w1"), joined("w2")], lost_for_each_join)
    finally:
        await store.close()
    assert len(result.decided) == 2  # one round decided, the next decided nothing
    version_reads = [s for s in statements if "max(stream_version)" in s]
    assert len(version_reads) == 2  # the causes' append, then the one round with decisions
