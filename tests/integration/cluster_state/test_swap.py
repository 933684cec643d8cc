"""Drained manifest swaps on nrt.manifest.apply, with the real worker hosting the models.

The in-flight request's RequestAdmitted / RequestCompleted are published by the test, as
the gateway would; the models are loaded, served and unloaded by the real worker.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from nats.aio.client import Client

from nrt.adapters.bus import rpc, subjects
from nrt.adapters.bus.errors import RemoteError
from nrt.adapters.bus.jetstream import EventPublisher
from nrt.adapters.store import EventStore
from nrt.core.eventlog import RecordedEvent
from nrt.core.events import (
    DrainCompleted,
    DrainStarted,
    ManifestApplied,
    ModelPlaced,
    RequestAdmitted,
    RequestCompleted,
    RequestFailed,
    TierChanged,
)
from nrt.core.protocol import ApplyManifest, ApplyResult, GatewayHeartbeat
from state_services import OnOneWorker, Workers
from worker_helpers import ALL_PLACED, generate, tiers, worker_manifest


def admitted(request_id: str, version: int = 1, gateway_id: str | None = None) -> RequestAdmitted:
    return RequestAdmitted(
        request_id=request_id, manifest_version=version, model_id="router", stream=True, gateway_id=gateway_id
    )


def completed(request_id: str, version: int = 1) -> RequestCompleted:
    return RequestCompleted(
        request_id=request_id,
        manifest_version=version,
        model_id="legal",
        prompt_tokens=4,
        completion_tokens=8,
        latency_ms=9.0,
    )


async def apply(nc: Client, text: str) -> ApplyResult:
    return await rpc.request(
        nc, subjects.MANIFEST_APPLY, ApplyManifest(text=text, requested_by="test"), ApplyResult, 60
    )


def first(log: list[RecordedEvent], kind: type, **fields: object) -> int:
    for record in log:
        if isinstance(record.event, kind) and all(getattr(record.event, k) == v for k, v in fields.items()):
            return record.position
    raise AssertionError(f"no {kind.__name__} {fields} in the log")


async def test_a_swap_warms_first_waits_for_the_old_versions_requests_then_cuts_over(
    nc: Client, llama_copies: Callable[[str], str], event_store: EventStore, on_one_worker: OnOneWorker
) -> None:
    v1 = worker_manifest(llama_copies, gpu="4GB")
    service = await on_one_worker(v1)
    publisher = EventPublisher(nc)
    await publisher.publish(admitted("in-flight"))  # a request running under v1
    await service.controller.wait_for(lambda s: s.in_flight_under(1) == 1, within=10)
    v2 = worker_manifest(llama_copies, gpu="4GB", legal=False, contracts=True)  # adds contracts, drops legal
    started = time.perf_counter()
    swap = asyncio.create_task(apply(nc, v2))
    await service.controller.wait_for(lambda s: s.draining, within=30)
    drain_began = time.perf_counter()
    assert tiers(service.controller.cluster)["contracts"] == {"w1": "standby"}  # loaded while v1 serves
    with pytest.raises(RemoteError) as busy:
        await apply(nc, v1)
    assert (busy.value.status, busy.value.code) == (409, "swap_in_progress")
    # the old version keeps serving its request: the model v2 drops still answers during the drain
    chunks = await generate(nc, "legal", max_tokens=16)
    assert chunks[-1].finish_reason in ("stop", "length")
    await asyncio.sleep(0.5)
    assert not swap.done()
    await publisher.publish(completed("in-flight"))
    result = await swap
    elapsed = time.perf_counter() - started
    assert (result.from_version, result.to_version, result.outcome) == (1, 2, "applied")
    assert result.warmed == ("contracts",)
    assert result.abandoned == 0
    state = await service.controller.wait_for(lambda s: "legal" not in tiers(s), within=30)
    assert state.manifest_version == 2
    assert not state.draining
    assert tiers(state)["contracts"] == {"w1": "standby"}
    log = [r async for r in event_store.read_positions()]
    placed = first(log, ModelPlaced, model_id="contracts", manifest_version=2)
    warmed = first(log, TierChanged, model_id="contracts", to_tier="standby")
    drain = first(log, DrainStarted, from_version=1, to_version=2, in_flight=1)
    done = first(log, RequestCompleted, request_id="in-flight")
    cut = first(log, ManifestApplied, version=2)
    drained = first(log, DrainCompleted, outcome="drained", abandoned=0)
    unloaded = first(log, TierChanged, model_id="legal", to_tier="unloaded", reason="manifest_swap")
    assert placed < warmed < drain < done < cut < drained < unloaded
    print(
        f"\nswap v1->v2: warm-up {(drain_began - started) * 1e3:.0f} ms, drain {result.drained_ms:.0f} ms "
        f"(held open by the in-flight request), whole swap {elapsed * 1e3:.0f} ms"
    )


async def test_a_drain_that_outlasts_its_timeout_cuts_over_and_counts_the_abandoned(
    nc: Client, llama_copies: Callable[[str], str], event_store: EventStore, on_one_worker: OnOneWorker
) -> None:
    service = await on_one_worker(worker_manifest(llama_copies))
    await EventPublisher(nc).publish(admitted("stuck"))
    await service.controller.wait_for(lambda s: s.in_flight_under(1) == 1, within=10)
    v2 = worker_manifest(llama_copies, drain="{timeout: 1s, admission_wait: 1s}", legal=False)
    started = time.perf_counter()
    result = await apply(nc, v2)
    assert (result.to_version, result.outcome, result.abandoned) == (2, "applied", 1)
    assert 1_000 <= result.drained_ms < 3_000
    assert time.perf_counter() - started < 10
    completed_drain = [r.event for r in await event_store.query(types=["DrainCompleted"])]
    assert [(e.outcome, e.abandoned) for e in completed_drain if isinstance(e, DrainCompleted)] == [("timed_out", 1)]


async def test_a_swap_whose_model_cannot_load_leaves_the_old_manifest_serving(
    nc: Client,
    llama_copies: Callable[[str], str],
    event_store: EventStore,
    tmp_path: object,
    on_one_worker: OnOneWorker,
) -> None:
    service = await on_one_worker(worker_manifest(llama_copies))
    broken = "    - id: broken\n      source: /nonexistent/export\n      tier: standby\n      footprint: 1GB\n"
    v2 = worker_manifest(llama_copies, contracts=True, extra=broken)
    with pytest.raises(RemoteError) as failed:
        await apply(nc, v2)
    assert failed.value.code == "swap_failed"
    assert failed.value.status == 400
    assert "could not load broken for manifest v2" in failed.value.message
    assert "no model.onnx in /nonexistent/export" in failed.value.message
    assert "manifest v1 is still serving" in failed.value.message
    state = await service.controller.wait_for(lambda s: "contracts" not in tiers(s), within=20)  # the warm-up undone
    assert state.manifest_version == 1
    assert not state.draining
    assert tiers(state) == ALL_PLACED
    assert await event_store.query(types=["DrainStarted", "DrainCompleted"]) == []
    assert (await generate(nc, "legal"))[-1].finish_reason in ("stop", "length")


async def test_invalid_unchanged_and_unplaceable_manifests(
    nc: Client,
    workers: Workers,
    llama_copies: Callable[[str], str],
    event_store: EventStore,
    on_one_worker: OnOneWorker,
) -> None:
    v1 = worker_manifest(llama_copies)
    service = await on_one_worker(v1)
    with pytest.raises(RemoteError) as invalid:
        await apply(nc, v1.replace("tier: standby", "tier: frozen"))
    assert (invalid.value.status, invalid.value.code) == (400, "invalid_manifest")
    assert "unknown tier 'frozen'; valid: 'resident', 'standby' or 'remote'" in invalid.value.message
    same = await apply(nc, v1)
    assert (same.outcome, same.from_version, same.to_version) == ("unchanged", 1, 1)
    ram = service.controller.cluster.workers["w1"].ram_bytes
    huge = f"    - id: huge\n      source: {llama_copies('huge')}\n      tier: standby\n      footprint: {ram * 2}\n"
    with pytest.raises(RemoteError) as too_big:
        await apply(nc, worker_manifest(llama_copies, ram=f"{ram * 3}", extra=huge))
    assert (too_big.value.status, too_big.value.code) == (422, "manifest_does_not_fit")
    assert "cannot place huge (standby" in too_big.value.message
    assert "w1 has" in too_big.value.message
    assert service.controller.cluster.manifest_version == 1
    assert [r.event.type for r in await event_store.query(types=["ManifestApplied", "DrainStarted"])] == [
        "ManifestApplied"
    ]


async def test_requests_whose_gateway_is_gone_are_failed_at_start_and_hold_no_swap(
    nc: Client, llama_copies: Callable[[str], str], event_store: EventStore, on_one_worker: OnOneWorker
) -> None:
    # the log of a stack killed mid-stream: two requests admitted by a gateway that is no more, one by a live one
    publisher = EventPublisher(nc)
    for request_id in ("cut-1", "cut-2"):
        await publisher.publish(admitted(request_id, gateway_id="gateway-killed"))
    await publisher.publish(admitted("held", gateway_id="gateway-live"))
    beats = asyncio.create_task(gateway_beats(nc, "gateway-live"))
    try:
        service = await on_one_worker(worker_manifest(llama_copies))
        state = await service.controller.wait_for(lambda s: set(s.in_flight) == {"held"}, within=10)
        assert state.admitted_by == {"held": "gateway-live"}
        failed = [r.event for r in await event_store.query(types=["RequestFailed"])]
        assert sorted((e.request_id, e.code, e.status) for e in failed if isinstance(e, RequestFailed)) == [
            ("cut-1", "owner_lost", 503),
            ("cut-2", "owner_lost", 503),
        ]
        await publisher.publish(completed("held"))  # the live gateway ends its own request
        await service.controller.wait_for(lambda s: not s.in_flight, within=10)
    finally:
        beats.cancel()
    # the swap drains at once: its 30 s timeout is not waited out
    started = time.perf_counter()
    result = await apply(nc, worker_manifest(llama_copies, legal=False))
    assert (result.to_version, result.outcome, result.abandoned) == (2, "applied", 0)
    assert result.drained_ms < 5_000
    assert time.perf_counter() - started < 15
    drains = [r.event for r in await event_store.query(types=["DrainCompleted"])]
    assert [(e.outcome, e.abandoned) for e in drains if isinstance(e, DrainCompleted)] == [("drained", 0)]
    # the stream carried cluster_state's RequestFailed too, and its recorder took it (the log has it once)
    last = (await nc.jetstream().stream_info(subjects.EVENTS_STREAM)).state.last_seq
    for _ in range(200):  # the recorder reads the stream up to its last message (10 s at most)
        if service.recorder.sequence >= last:
            break
        await asyncio.sleep(0.05)
    assert (service.recorder.sequence, service.recorder.rejected) == (last, 0)


async def gateway_beats(nc: Client, gateway_id: str, every_s: float = 0.2) -> None:
    """Heartbeat as a live gateway does."""
    while True:
        await nc.publish(subjects.GATEWAY_HEARTBEAT, rpc.encode(GatewayHeartbeat(gateway_id=gateway_id)))
        await asyncio.sleep(every_s)
