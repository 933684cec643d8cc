"""The worker's presence without NATS: joining, heartbeats, leaving, and events published in the background."""

from __future__ import annotations

import asyncio
import logging

import pytest

from nrt.core.device import Device
from nrt.core.events import Event, TierChanged, WorkerJoined, WorkerLost
from nrt.core.protocol import HostedModel, WorkerHeartbeat
from nrt.core.vocabulary import DeviceKind
from nrt.hosting.presence import Presence
from nrt.hosting.resources import HostResources
from shell_fakes import LLAMA, Jobs, Shell

CPU = Device(kind=DeviceKind.CPU, id="cpu", name="a test CPU", total_bytes=16 << 30)
RESOURCES = HostResources(
    host="h1", cpu_count=4, ram_bytes=8 << 30, accelerator_bytes=0, providers=("CPUExecutionProvider",), device=CPU
)


def tier_changed(model_id: str) -> TierChanged:
    return TierChanged(
        model_id=model_id,
        worker_id="w-jobs",
        from_tier="standby",
        to_tier="resident",
        reason="test",
        elapsed_ms=1.0,
        bytes_held=1,
    )


class GatedPublisher(Shell):
    """Publishes a TierChanged only once ``gate`` opens (a slow JetStream); fails for model ``broken``."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()

    async def publish(self, event: Event) -> int:
        if isinstance(event, TierChanged):
            await self.gate.wait()
            if event.model_id == "broken":
                raise ConnectionError("the stream is gone")
        return await super().publish(event)


async def test_joining_announces_the_worker_then_reports_what_it_holds(jobs: Jobs) -> None:
    shell = Shell()
    presence = Presence("w-jobs", RESOURCES, jobs.host, shell, shell.send_heartbeat, heartbeat_s=60)
    await jobs.command("load", "m", source=LLAMA, tier="standby")
    jobs.host.get("m").sessions.add("s1")
    await presence.join()
    joined, beat = shell.calls
    assert isinstance(joined, WorkerJoined)
    assert (joined.worker_id, joined.host, joined.cpu_count, joined.ram_bytes, joined.providers) == (
        "w-jobs",
        "h1",
        4,
        8 << 30,
        ("CPUExecutionProvider",),
    )
    assert joined.device == CPU
    assert isinstance(beat, WorkerHeartbeat)
    assert (beat.worker_id, beat.host, beat.ram_bytes) == ("w-jobs", "h1", 8 << 30)
    assert beat.device == CPU  # what it runs models on, and the memory free there now (the host's RAM)
    assert beat.device_free_bytes is not None
    assert 0 < beat.device_free_bytes <= jobs.host.memory.device.total_bytes
    assert beat.models == (
        HostedModel(model_id="m", tier="standby", bytes_held=jobs.host.bytes_held("m"), active_requests=0, sessions=1),
    )
    assert beat.models[0].bytes_held > 0
    assert beat.sent_at > 0


async def test_heartbeats_beat_every_interval_until_stopping(jobs: Jobs) -> None:
    beats: list[WorkerHeartbeat] = []
    stopping = asyncio.Event()

    async def send(beat: WorkerHeartbeat) -> None:
        beats.append(beat)
        if len(beats) == 3:
            stopping.set()

    presence = Presence("w-jobs", RESOURCES, jobs.host, Shell(), send, heartbeat_s=0.01)
    await asyncio.wait_for(presence.run_heartbeats(stopping), 1)
    assert len(beats) == 3
    assert all(beat.models == () for beat in beats)
    assert beats[0].sent_at < beats[1].sent_at < beats[2].sent_at


async def test_events_go_out_in_the_background_and_leaving_waits_for_them(
    jobs: Jobs, caplog: pytest.LogCaptureFixture
) -> None:
    publisher = GatedPublisher()
    presence = Presence("w-jobs", RESOURCES, jobs.host, publisher, publisher.send_heartbeat)
    presence.emit(tier_changed("m"))  # returns at once: JetStream has not stored it yet
    presence.emit(tier_changed("broken"))
    await asyncio.sleep(0.01)
    assert publisher.calls == []
    leaving = asyncio.create_task(presence.leave())
    await asyncio.sleep(0.01)
    assert not leaving.done()  # the goodbye waits for the events still being published
    publisher.gate.set()
    with caplog.at_level(logging.ERROR, logger="nrt.worker"):
        await asyncio.wait_for(leaving, 1)
    stored = publisher.calls
    assert [type(e) for e in stored] == [TierChanged, WorkerLost]
    assert isinstance(stored[1], WorkerLost)
    assert (stored[1].worker_id, stored[1].reason) == ("w-jobs", "shutdown")
    assert "could not publish TierChanged" in caplog.text  # a failed publish is logged, never raised
