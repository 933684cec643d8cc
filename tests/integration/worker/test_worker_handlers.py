"""The worker's control subject and the service shell's health subject on FastStream's in-memory broker.

The worker's Control job is served exactly as ``Worker.start`` serves it, on real tiny
models (no NATS server): commands and their replies, and the error frames a caller gets
instead of a timeout (a refused command, a message that does not validate).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from faststream.nats import NatsBroker, TestNatsBroker

from nrt.adapters.bus import broker as bus
from nrt.adapters.bus import subjects
from nrt.adapters.bus.errors import RemoteError
from nrt.adapters.settings import Settings
from nrt.core.events import TierChanged
from nrt.core.protocol import ControlCommand, ControlReply, Health, HealthQuery
from nrt.entrypoints.service import ServiceContext, health_subject, serve_health
from shell_fakes import LLAMA, Jobs, Subscribed

CONTROL = subjects.control("w-jobs")


@pytest.fixture
async def memory(jobs: Jobs) -> AsyncIterator[NatsBroker]:
    async with TestNatsBroker(bus.new_broker("nats://in-memory:4222", "specialist_worker")) as broker:
        await bus.serve(broker, CONTROL, jobs.control.handle)
        yield broker


async def command(broker: NatsBroker, **fields: object) -> ControlReply:
    return await bus.call(broker, CONTROL, ControlCommand(**fields), ControlReply, timeout=60)  # type: ignore[arg-type]


async def test_a_load_command_over_the_bus_loads_subscribes_and_answers_the_tier(
    memory: NatsBroker, jobs: Jobs
) -> None:
    reply = await command(memory, action="load", model_id="billing", reason="placement", source=LLAMA, tier="resident")
    assert (reply.worker_id, reply.model_id, reply.tier, reply.changed) == ("w-jobs", "billing", "resident", True)
    assert jobs.shell.calls[0] == Subscribed("billing")
    assert [e.to_tier for e in jobs.shell.of(TierChanged)] == ["standby", "resident"]
    demoted = await command(memory, action="demote", model_id="billing", reason="budget_pressure")
    assert (demoted.tier, demoted.changed) == ("standby", True)


async def test_a_refused_command_comes_back_as_its_error_frame(memory: NatsBroker) -> None:
    with pytest.raises(RemoteError) as refused:
        await command(memory, action="load", model_id="x", reason="placement", source="hf://org/model", tier="resident")
    assert (refused.value.status, refused.value.code) == (400, "unresolvable_source")
    assert "hf://org/model: not in the Hugging Face cache" in refused.value.message


async def test_a_command_that_does_not_validate_gets_a_400_naming_the_field(memory: NatsBroker) -> None:
    reply = await memory.request(b'{"action": "explode", "model_id": "m", "reason": "r"}', CONTROL, timeout=1)
    with pytest.raises(RemoteError) as bad:
        bus.raise_if_error(reply.headers, reply.body)
    assert bad.value.status == 400
    assert "ControlCommand" in bad.value.message
    assert "$.action" in bad.value.message
    not_json = await memory.request(b"load billing", CONTROL, timeout=1)
    with pytest.raises(RemoteError) as garbled:
        bus.raise_if_error(not_json.headers, not_json.body)
    assert (garbled.value.status, garbled.value.code) == (400, "bad_request")


async def test_the_service_shell_answers_health_with_its_instance() -> None:
    async with TestNatsBroker(bus.new_broker("nats://in-memory:4222", "router_svc")) as broker:
        ctx = ServiceContext(name="router_svc", settings=Settings(), broker=broker)
        await serve_health(ctx)
        await asyncio.sleep(0)
        health = await bus.call(broker, health_subject("router_svc"), HealthQuery(), Health, timeout=1)
        assert (health.service, health.instance, health.status) == ("router_svc", ctx.instance, "ok")
        assert health.uptime_s >= 0
