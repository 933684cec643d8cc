"""The controller writes its decisions with their cause and folds them from that append (in memory, no NATS)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime

import pytest
from faststream.nats import NatsBroker, TestNatsBroker

from cluster_helpers import applied, beat, joined, manifest, view
from cluster_state.controller import Controller, split_decisions
from nrt.adapters.bus import broker as bus
from nrt.adapters.store import InMemoryEventStore
from nrt.core.eventlog import Checkpoint, Decide, DecidedAppend, Decisions, RecordedEvent
from nrt.core.events import Event, ModelPlaced
from nrt.core.policies import Control, Emit
from nrt.core.protocol import ControlCommand, GatewayHeartbeat
from nrt.core.vocabulary import Reason, Tier


class NoPublisher:
    """Decisions must not take the stream: publishing one fails the test."""

    async def publish(self, event: Event) -> int:
        raise AssertionError(f"{event.type} was published instead of appended")


class FailingStore(InMemoryEventStore):
    """A store whose transaction fails once the decider has decided (the database went away): nothing is stored."""

    fail = True

    async def append_decided(
        self, causes: Sequence[Event], decide: Decide, checkpoint: Checkpoint | None = None
    ) -> DecidedAppend:
        def then_fail(recorded: list[RecordedEvent]) -> Decisions:
            decided = decide(recorded)
            if self.fail and decided.events:
                raise ConnectionError("the database went away before the commit")
            return decided

        return await super().append_decided(causes, then_fail, checkpoint)


@pytest.fixture
async def memory() -> AsyncIterator[NatsBroker]:
    async with TestNatsBroker(bus.new_broker("nats://in-memory:4222", "cluster_state")) as broker:
        yield broker


def controller(broker: NatsBroker, store: InMemoryEventStore) -> Controller:
    state = view([], now=datetime.now(UTC), heartbeats=["w1"])
    c = Controller(broker, NoPublisher(), state, decisions=store)  # type: ignore[arg-type]
    c.acting = True
    return c


async def test_placements_are_appended_with_the_worker_that_caused_them_and_folded_at_once(memory: NatsBroker) -> None:
    store = InMemoryEventStore()
    c = controller(memory, store)
    result = await c.record([applied(manifest()), joined("w1")], Checkpoint(consumer="cluster_state", sequence=2))
    placed = [r for r in result.recorded if isinstance(r.event, ModelPlaced)]
    assert placed  # decided in reaction to WorkerJoined, in the same append
    assert [r.event.type for r in result.recorded[:2]] == ["ManifestApplied", "WorkerJoined"]
    assert c.position == result.head == await store.head()
    assert all("w1" in c.cluster.models[r.event.model_id].placements for r in placed)  # counted at once
    assert [o.event_id for o in await store.unpublished()] == [r.event.event_id for r in placed]
    assert await store.checkpoint("cluster_state") == 2
    c.cancel()


async def test_a_lost_commit_undoes_the_fold_and_the_batch_is_decided_again(memory: NatsBroker) -> None:
    store = FailingStore()
    c = controller(memory, store)
    causes = [applied(manifest()), joined("w1")]
    with pytest.raises(ConnectionError):
        await c.record(causes)
    assert (c.position, c.cluster.manifest_version, c.cluster.workers) == (0, 0, {})  # the fold is undone
    assert await store.head() == 0
    store.fail = False
    retried = await c.record(causes)  # the recorder's retry: the same batch, decided again
    assert retried.duplicates == 0
    assert any(isinstance(r.event, ModelPlaced) for r in retried.recorded)
    assert c.position == await store.head()
    assert "w1" in c.cluster.workers
    c.cancel()


class HangingStore(InMemoryEventStore):
    """A transaction that hangs until ``release`` is set (a database frozen), then fails (its session ended)."""

    def __init__(self) -> None:
        super().__init__()
        self.hanging = asyncio.Event()
        self.release = asyncio.Event()

    async def append_decided(
        self, causes: Sequence[Event], decide: Decide, checkpoint: Checkpoint | None = None
    ) -> DecidedAppend:
        decide([])
        self.hanging.set()
        await self.release.wait()
        raise ConnectionError("terminating connection due to idle-in-transaction timeout")


async def test_a_failed_transaction_keeps_the_heartbeats_heard_while_it_hung(memory: NatsBroker) -> None:
    store = HangingStore()
    c = controller(memory, store)
    recording = asyncio.ensure_future(c.record([applied(manifest()), joined("w1")]))
    await store.hanging.wait()
    await c.on_heartbeat(beat("w1"))
    await c.on_gateway_heartbeat(GatewayHeartbeat(gateway_id="g1", sent_at=0.0))
    c.listening()
    heard = (c.state.seen["w1"].last_seen, c.state.gateways["g1"], c.state.started_at)
    store.release.set()
    with pytest.raises(ConnectionError):
        await recording
    assert c.position == 0  # the fold is undone
    assert (c.state.seen["w1"].last_seen, c.state.gateways["g1"], c.state.started_at) == heard  # what was heard is not
    c.cancel()


async def test_a_decision_outside_a_batch_is_a_transaction_of_its_own_with_what_it_leads_to(
    memory: NatsBroker,
) -> None:
    store = InMemoryEventStore()
    c = controller(memory, store)
    await c.record([applied(manifest())])
    worker = joined("w1")
    await c.decide([worker])  # e.g. a key, the bootstrap manifest: counted once decide() returns
    assert "w1" in c.cluster.workers
    outbox = [o.type for o in await store.unpublished()]
    assert outbox[0] == "WorkerJoined"
    assert set(outbox[1:]) == {"ModelPlaced"}  # the placements it caused, in the same transaction
    assert c.position == await store.head()
    c.cancel()


def test_only_the_emits_that_lead_their_group_are_decisions() -> None:
    first, second, after = joined("w1"), joined("w2"), joined("w3")
    load = Control(
        "w1", ControlCommand(action="load", model_id="m", reason=Reason.PLACEMENT), tier=Tier.RESIDENT, group="g"
    )
    decided, rest = split_decisions([Emit(first, "g"), load, Emit(after, "g"), Emit(second)])
    assert decided == {"g": [first], "#3": [second]}
    assert rest == {"g": [load, Emit(after, "g")], "#3": []}  # an Emit after a worker command waits for its reply


async def test_the_stream_snapshot_holds_the_stream_up_to_its_checkpoint_and_the_decisions_on_their_way(
    memory: NatsBroker,
) -> None:
    """What a follower behind the stream starts from: the decisions a batch caused are in the fold before the
    stream carries them, so they are named as ``ahead`` until their echo comes back through the recorder."""
    store = InMemoryEventStore()
    c = controller(memory, store)
    c.resume_stream(4, ["an-unpublished-decision"])  # the start: the recorder's position and the outbox
    assert (await c.stream_snapshot()).ahead == ("an-unpublished-decision",)
    await c.record([applied(manifest()), joined("w1")], Checkpoint(consumer="cluster_state", sequence=6))
    placed = [o.event_id for o in await store.unpublished()]
    assert placed  # the placements WorkerJoined caused: in the fold, not yet on the stream
    snapshot = await c.stream_snapshot()
    assert (snapshot.sequence, snapshot.position, snapshot.state) == (6, await store.head(), c.cluster)
    assert snapshot.ahead == ("an-unpublished-decision", *placed)

    # the relay publishes them (sequences 7, 8, ...): the recorder gets them back, the log skips them
    echo = [r.event for r in await store.query(after_position=2)]
    result = await c.record(echo, Checkpoint(consumer="cluster_state", sequence=6 + len(echo)))
    assert (result.recorded, result.duplicates) == ([], len(echo))
    snapshot = await c.stream_snapshot()
    assert (snapshot.sequence, snapshot.ahead) == (6 + len(echo), ("an-unpublished-decision",))

    # a decision of its own (a key, a tick) is ahead of the stream as well; a batch without a checkpoint
    # (a test's append) moves no sequence
    worker = joined("w2")
    await c.decide([worker])
    snapshot = await c.stream_snapshot()
    assert worker.event_id in snapshot.ahead
    assert snapshot.sequence == 6 + len(echo)
    c.cancel()


async def test_a_failed_transaction_changes_nothing_the_stream_snapshot_says(memory: NatsBroker) -> None:
    store = FailingStore()
    c = controller(memory, store)
    c.resume_stream(3, [])
    with pytest.raises(ConnectionError):
        await c.record([applied(manifest()), joined("w1")], Checkpoint(consumer="cluster_state", sequence=5))
    snapshot = await c.stream_snapshot()
    assert (snapshot.sequence, snapshot.position, snapshot.ahead) == (3, 0, ())
    c.cancel()
