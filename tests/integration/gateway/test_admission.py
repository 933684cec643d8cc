"""Admission control follows manifest swaps in the event stream (real NATS, the real follower)."""

from __future__ import annotations

import asyncio
import time

import pytest
from faststream.nats import NatsBroker
from nats.aio.client import Client

from api_gateway.admission import AdmissionGate
from api_gateway.errors import ApiError
from harness import FIXTURES
from nrt.adapters.bus.follow import EventFollower
from nrt.adapters.bus.jetstream import EventPublisher
from nrt.core.events import DrainCompleted, DrainStarted, ManifestApplied

TEXT = (FIXTURES / "tiny-support.yaml").read_text()  # drain.admission_wait: 1s


def applied(version: int) -> ManifestApplied:
    return ManifestApplied(version=version, cluster="tiny-support", digest=f"d{version}", text=TEXT)


async def gate_on(broker: NatsBroker) -> AdmissionGate:
    follower = EventFollower(broker)
    gate = AdmissionGate(follower)
    await follower.start()
    return gate


async def test_no_manifest_means_503(nc: Client, broker: NatsBroker) -> None:
    gate = await gate_on(broker)
    with pytest.raises(ApiError) as caught:
        await gate.admit()
    assert (caught.value.status, caught.value.code) == (503, "no_manifest")


async def test_a_request_during_a_swap_waits_and_runs_under_the_new_version(nc: Client, broker: NatsBroker) -> None:
    publisher = EventPublisher(nc)
    await publisher.publish(applied(1))
    gate = await gate_on(broker)
    await gate.follower.wait_for(lambda s: s.manifest_version == 1, within=5)
    assert (await gate.admit()).version == 1
    await publisher.publish(DrainStarted(from_version=1, to_version=2, in_flight=0, timeout_s=5))
    await gate.follower.wait_for(lambda s: s.draining, within=5)
    waiting = asyncio.create_task(gate.admit())
    await asyncio.sleep(0.2)
    assert not waiting.done()
    await publisher.publish(DrainCompleted(from_version=1, to_version=2, outcome="drained", waited_ms=1))
    await asyncio.sleep(0.2)
    assert not waiting.done()  # drained, but not cut over yet: still v1 in force
    await publisher.publish(applied(2))
    admission = await asyncio.wait_for(waiting, 2)
    assert admission.version == 2


async def test_a_swap_that_outlasts_the_wait_is_503_with_retry_after(nc: Client, broker: NatsBroker) -> None:
    publisher = EventPublisher(nc)
    await publisher.publish(applied(1))
    await publisher.publish(DrainStarted(from_version=1, to_version=2, in_flight=3, timeout_s=30))
    gate = await gate_on(broker)
    await gate.follower.wait_for(lambda s: s.draining, within=5)
    started = time.monotonic()
    with pytest.raises(ApiError) as caught:
        await gate.admit()
    assert 0.9 < time.monotonic() - started < 2.0  # the manifest's admission_wait
    error = caught.value
    assert (error.status, error.code, error.headers) == (503, "manifest_swap_in_progress", {"Retry-After": "1"})
    assert "swapping to manifest v2" in error.message


async def test_an_aborted_swap_reopens_under_the_old_version(nc: Client, broker: NatsBroker) -> None:
    publisher = EventPublisher(nc)
    await publisher.publish(applied(1))
    await publisher.publish(DrainStarted(from_version=1, to_version=2, in_flight=0, timeout_s=30))
    gate = await gate_on(broker)
    await gate.follower.wait_for(lambda s: s.draining, within=5)
    waiting = asyncio.create_task(gate.admit())
    await publisher.publish(DrainCompleted(from_version=1, to_version=2, outcome="aborted", waited_ms=1))
    assert (await asyncio.wait_for(waiting, 2)).version == 1
