"""cluster_state's handlers on FastStream's in-memory broker (TestNatsBroker): no NATS, no PostgreSQL.

The promote handler and the heartbeat subscriber are served exactly as the service serves
them (``nrt.bus.broker.serve``); a fake worker answers the control commands the policies
send, so what crosses the bus is checked message by message. The real-server tests of the
same paths are in test_with_worker.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from cluster_helpers import GB, applied, beat, joined, manifest, placed, view
from faststream.nats import NatsBroker, TestNatsBroker

from cluster_state.controller import Controller
from cluster_state.promotion import promote
from nrt.bus import broker as bus
from nrt.bus import subjects
from nrt.bus.errors import RemoteError
from nrt.events import Event
from nrt.protocol import ControlCommand, ControlReply, PromoteModel, PromoteResult


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
