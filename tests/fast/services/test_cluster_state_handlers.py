"""cluster_state's handlers on FastStream's in-memory broker (TestNatsBroker): no NATS, no PostgreSQL.

The promote handler and the heartbeat subscriber are served exactly as the service serves
them (``nrt.adapters.bus.broker.serve``); a fake worker answers the control commands the policies
send, so what crosses the bus is checked message by message. The real-server tests of the
same paths are in test_with_worker.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from faststream.nats import NatsBroker, TestNatsBroker
from msgspec.structs import replace

from cluster_helpers import GB, applied, beat, joined, manifest, manifest_text, placed, router_host, view
from cluster_state.controller import Controller
from cluster_state.promotion import promote
from cluster_state.swap import Swapper
from nrt.adapters.bus import broker as bus
from nrt.adapters.bus import subjects
from nrt.adapters.bus.errors import RemoteError
from nrt.adapters.store import InMemoryEventStore
from nrt.core.events import Event, TierChanged
from nrt.core.policies import ControlState
from nrt.core.policies.model import Pending, pending_key
from nrt.core.protocol import (
    ApplyManifest,
    ApplyResult,
    ControlCommand,
    ControlReply,
    PromoteModel,
    PromoteResult,
    StateQuery,
)
from nrt.core.state import ClusterState
from nrt.core.vocabulary import Tier, WorkerRole


class Published:
    """The events the controller publishes (its Emit commands), kept in order."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    async def publish(self, event: Event) -> int:
        self.events.append(event)
        return len(self.events)


@pytest.fixture
async def memory() -> AsyncIterator[NatsBroker]:
    async with TestNatsBroker(bus.new_broker("nats://in-memory:4222", "cluster_state")) as broker:
        yield broker


def controller_on(broker: NatsBroker, **manifest_options: str) -> Controller:
    """A controller whose log holds a manifest and worker w1 with router, billing, technical resident, legal standby."""
    m = manifest(**manifest_options)
    events = [applied(m), joined("w1")]
    for model_id, tier in (("router", "resident"), ("billing", "resident"), ("technical", "resident")):
        events += placed(model_id, "w1", tier)
    events += placed("legal", "w1", "standby")
    return Controller(broker, Published(), view(events, now=datetime.now(UTC), heartbeats=["w1"]))  # type: ignore[arg-type]


async def serve_promote(broker: NatsBroker, controller: Controller) -> None:
    async def handle(request: PromoteModel) -> PromoteResult:
        return await promote(controller, request)

    await bus.serve(broker, subjects.PROMOTE, handle)


async def fake_worker(broker: NatsBroker) -> list[ControlCommand]:
    """w1's control subject: answers every command as done, and keeps them."""
    received: list[ControlCommand] = []

    async def control(command: ControlCommand) -> ControlReply:
        received.append(command)
        tier = {"promote": "resident", "demote": "standby", "unload": "unloaded"}.get(command.action, "resident")
        return ControlReply(
            worker_id="w1", model_id=command.model_id, tier=tier, bytes_held=GB, elapsed_ms=1.0, changed=True
        )

    await bus.serve(broker, subjects.control("w1"), control)
    return received


async def test_promote_demotes_the_least_recently_used_resident_on_the_worker_first(memory: NatsBroker) -> None:
    controller = controller_on(memory, gpu="3GB")
    await serve_promote(memory, controller)
    received = await fake_worker(memory)
    result = await bus.call(memory, subjects.PROMOTE, PromoteModel(model_id="legal"), PromoteResult, timeout=5)
    assert [(c.action, c.model_id) for c in received][-1] == ("promote", "legal")
    demotions = [c for c in received if c.action == "demote"]
    assert [c.model_id for c in demotions] == list(result.demoted)
    assert len(demotions) == 1
    assert demotions[0].model_id in ("billing", "technical")  # never the critical router
    assert (result.model_id, result.worker_id) == ("legal", "w1")


async def test_promote_waits_for_a_change_of_the_model_in_flight_then_promotes_it(memory: NatsBroker) -> None:
    # legal's load to standby has been answered, but its TierChanged is not folded yet: a promotion asked now must
    # not wait for a resident tier nobody would bring; once the load settles, it is decided again
    controller = controller_on(memory)
    now = datetime.now(UTC)
    loading = Pending(
        key=pending_key("legal", "w1"),
        kind="tier",
        worker_id="w1",
        model_id="legal",
        tier=Tier.STANDBY,
        sent_at=now,
        expires_at=now + timedelta(seconds=30),
        replied=True,
    )
    controller.state = replace(controller.state, pending={loading.key: loading})
    await serve_promote(memory, controller)
    received = await fake_worker(memory)
    asked = asyncio.create_task(
        bus.call(memory, subjects.PROMOTE, PromoteModel(model_id="legal"), PromoteResult, timeout=10)
    )
    await asyncio.sleep(0.4)
    assert received == []
    assert not asked.done()
    controller.state = replace(controller.state, pending={})  # the load's end is folded
    result = await asyncio.wait_for(asked, 5)
    assert [(c.action, c.model_id) for c in received] == [("promote", "legal")]
    assert (result.model_id, result.worker_id) == ("legal", "w1")


async def test_promote_is_refused_with_the_numbers_when_only_critical_models_hold_the_budget(
    memory: NatsBroker,
) -> None:
    controller = controller_on(memory, gpu="3GB", billing_priority="critical", technical_priority="critical")
    await serve_promote(memory, controller)
    received = await fake_worker(memory)
    with pytest.raises(RemoteError) as refused:
        await bus.call(memory, subjects.PROMOTE, PromoteModel(model_id="legal"), PromoteResult, timeout=5)
    assert (refused.value.status, refused.value.code) == (503, "budget_exhausted")
    assert "residents would hold 4 GB of gpu_budget 3 GB" in refused.value.message
    assert received == []  # nothing was demoted or promoted
    with pytest.raises(RemoteError) as unknown:
        await bus.call(memory, subjects.PROMOTE, PromoteModel(model_id="nope"), PromoteResult, timeout=5)
    assert unknown.value.status == 404


async def test_an_invalid_promote_request_gets_a_400_frame_naming_the_field_not_a_timeout(memory: NatsBroker) -> None:
    await serve_promote(memory, controller_on(memory))
    reply = await memory.request(b'{"model_id": 7}', subjects.PROMOTE, timeout=1)
    assert reply.headers[bus.FRAME] == bus.ERROR
    with pytest.raises(RemoteError) as bad:
        bus.raise_if_error(reply.headers, reply.body)
    assert bad.value.status == 400
    assert "PromoteModel" in bad.value.message
    assert "$.model_id" in bad.value.message


async def test_a_heartbeat_reaches_the_controller_and_an_undecodable_one_changes_nothing(memory: NatsBroker) -> None:
    controller = controller_on(memory)
    await bus.serve(memory, subjects.WORKER_HEARTBEAT, controller.on_heartbeat)
    before = controller.state.seen["w1"].beats
    await memory.publish(beat("w1"), subjects.WORKER_HEARTBEAT)
    await memory.publish(b'{"worker_id": "w2"}', subjects.WORKER_HEARTBEAT)  # missing every other field
    assert controller.state.seen["w1"].beats == before + 1
    assert "w2" not in controller.state.seen


# -- the whole control loop in memory: the broker, the log and a fake worker ---------------------


class Loopback:
    """The recorder's part without NATS or PostgreSQL: every event published is appended to an
    in-memory log (the same contract as the PostgreSQL store) and folded by the controller."""

    def __init__(self) -> None:
        self.log = InMemoryEventStore()
        self.controller: Controller | None = None

    async def publish(self, event: Event) -> int:
        result = await self.log.append([event])
        assert self.controller is not None
        self.controller.on_recorded(result.recorded)
        return await self.log.head()


async def worker_recording_its_tiers(broker: NatsBroker, loop: Loopback, worker_id: str = "w1") -> list[ControlCommand]:
    """A worker's control subject: obeys each command at once and records the TierChanged a real worker would."""
    received: list[ControlCommand] = []
    tiers: dict[str, Tier] = {}

    async def control(command: ControlCommand) -> ControlReply:
        received.append(command)
        before = tiers.get(command.model_id, Tier.UNLOADED)
        after = {
            "load": command.tier or Tier.RESIDENT,
            "promote": Tier.RESIDENT,
            "demote": Tier.STANDBY,
            "unload": Tier.UNLOADED,
        }.get(command.action, before)
        tiers[command.model_id] = after
        if after != before:
            await loop.publish(
                TierChanged(
                    model_id=command.model_id,
                    worker_id=worker_id,
                    from_tier=before,
                    to_tier=after,
                    reason=command.reason,
                    elapsed_ms=1.0,
                    bytes_held=GB if after != Tier.UNLOADED else 0,
                )
            )
        return ControlReply(
            worker_id=worker_id,
            model_id=command.model_id,
            tier=after,
            bytes_held=GB,
            elapsed_ms=1.0,
            changed=after != before,
        )

    await bus.serve(broker, subjects.control(worker_id), control)
    return received


async def test_the_control_loop_in_memory_places_a_manifest_then_swaps_in_a_drained_one(memory: NatsBroker) -> None:
    loop = Loopback()
    controller = Controller(memory, loop, ControlState(started_at=datetime.now(UTC)))  # type: ignore[arg-type]
    loop.controller = controller
    controller.acting = True
    received = await worker_recording_its_tiers(memory, loop)
    routed = await worker_recording_its_tiers(memory, loop, "r1")  # a router_svc instance: the entry model's worker

    async def state(query: StateQuery) -> ClusterState:
        return controller.cluster

    await bus.serve(memory, subjects.STATE, state)
    await bus.serve(memory, subjects.MANIFEST_APPLY, Swapper(controller).apply)
    await bus.serve(memory, subjects.WORKER_HEARTBEAT, controller.on_heartbeat)

    # a worker and a router host join and beat; the bootstrap manifest is applied: the policies place
    # the entry model on the router host and every other model on the worker
    await loop.publish(joined("w1"))
    await loop.publish(router_host("r1"))
    await memory.publish(beat("w1"), subjects.WORKER_HEARTBEAT)
    await memory.publish(beat("r1", role=WorkerRole.ROUTER), subjects.WORKER_HEARTBEAT)
    await loop.publish(applied(manifest()))
    await controller.settle_tasks()
    placed_now = await bus.call(memory, subjects.STATE, StateQuery(), ClusterState, timeout=5)
    assert {m: p.tiers for m, p in placed_now.models.items()} == {
        "router": {"r1": Tier.RESIDENT},
        "billing": {"w1": Tier.RESIDENT},
        "technical": {"w1": Tier.RESIDENT},
        "legal": {"w1": Tier.STANDBY},
    }
    assert {(c.action, c.model_id) for c in received} == {
        ("load", "billing"),
        ("load", "technical"),
        ("load", "legal"),
    }
    assert [(c.action, c.model_id) for c in routed] == [("load", "router")]

    # a drained swap that adds a standby model: warmed before the cut-over, then in force as v2
    received.clear()
    extra = "    - id: contracts\n      source: /models/contracts\n      tier: standby\n      footprint: 1GB\n"
    candidate = manifest_text(extra=extra) + "drain: {timeout: 2s, admission_wait: 1s}\n"
    result = await bus.call(memory, subjects.MANIFEST_APPLY, ApplyManifest(text=candidate), ApplyResult, timeout=30)
    assert (result.from_version, result.to_version, result.warmed) == (1, 2, ("contracts",))
    assert [(c.action, c.model_id) for c in received] == [("load", "contracts")]
    swap_events = [type(r.event).__name__ async for r in loop.log.read_positions() if r.event.stream_id == "manifest"]
    assert swap_events == ["ManifestApplied", "DrainStarted", "ManifestApplied", "DrainCompleted"]
    after = await bus.call(memory, subjects.STATE, StateQuery(), ClusterState, timeout=5)
    assert after.manifest_version == 2
    assert after.models["contracts"].placements["w1"].tier == Tier.STANDBY
    chain = await loop.log.verify()  # the in-memory log is hash-chained like the real one
    assert chain.ok
    assert chain.checked == await loop.log.head()

    # an invalid candidate is a 400 with every problem, and changes nothing
    with pytest.raises(RemoteError) as bad:
        await bus.call(memory, subjects.MANIFEST_APPLY, ApplyManifest(text="cluster: [\n"), ApplyResult, timeout=5)
    assert (bad.value.status, bad.value.code) == (400, "invalid_manifest")
    assert controller.cluster.manifest_version == 2
