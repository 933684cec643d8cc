"""The drained manifest swap end to end: ``PUT /v1/manifest`` through the real services.

One process runs the gateway, router_svc (hosting the router), a specialist worker and cluster_state over real
NATS and PostgreSQL (``start_stack`` with a database): cluster_state bootstraps the tiny
support manifest as v1 and places its models; the swap is its own, requested over HTTP
with the admin key. The requests go through the official ``openai`` client; the events
are read back from the PostgreSQL log.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
import pytest

from harness import ADMIN_KEY, ROUTER_HOST, Stack, start_stack
from nrt.adapters.store import EventStore
from nrt.core.eventlog import RecordedEvent
from nrt.core.events import (
    DrainCompleted,
    DrainStarted,
    ManifestApplied,
    ModelPlaced,
    RequestAdmitted,
    RequestCompleted,
    RequestRouted,
    TierChanged,
)
from nrt.core.protocol import GenerateChunk, GenerateRequest
from nrt.hosting.worker import Worker

BILLING = "I was charged twice for my order"
V1_DRAIN = "drain: {timeout: 5s, admission_wait: 1s}"  # as in the fixture manifest
DRAIN = "drain: {timeout: 20s, admission_wait: 2s}"
WORKER = "w-gateway"


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def with_specialist(text: str, model_id: str, source: str) -> str:
    """The manifest ``text`` with one more specialist (declared before the fallback)."""
    spec = (
        f"    - id: {model_id}\n      source: {source}\n      tier: standby\n      footprint: 1GB\n"
        "      generation: {max_tokens: 8}\n"
    )
    assert "\nfallback:" in text
    return text.replace("\nfallback:", f"{spec}\nfallback:", 1)


async def put_manifest(stack: Stack, text: str) -> Any:
    async with stack.http() as http:
        return await http.put(
            "/v1/manifest", content=text.encode(), headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=60
        )


async def until(condition: Callable[[], bool], within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "the condition did not hold in time"
        await asyncio.sleep(0.02)


@dataclass
class LastChunkHold:
    """Keeps the worker's next generation for ``model_id`` in flight: its last chunk waits for ``release``.

    The worker streams over NATS without back-pressure and tiny-llama (a 512-token context)
    answers in well under a second, so neither a large ``max_tokens`` nor a slow reader keeps a
    request in flight through the swap's warm-up and drain; this does, deterministically, with
    everything else (the tokens, the gateway's events, the drain's wait) real.
    """

    model_id: str
    reached: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    armed: bool = True

    def install(self, worker: Worker, monkeypatch: pytest.MonkeyPatch) -> None:
        generate = worker.serving.generate

        async def held(request: GenerateRequest) -> AsyncGenerator[GenerateChunk, None]:
            holding = self.armed and request.model_id == self.model_id
            self.armed = self.armed and not holding
            async for chunk in generate(request):
                if holding and chunk.finish_reason is not None:  # the last chunk waits for the release
                    self.reached.set()
                    await self.release.wait()
                yield chunk

        monkeypatch.setattr(worker.serving, "generate", held)


class Warnings(logging.Handler):
    """The warnings of one logger (on the logger itself: the gateway's Litestar app replaces the root handlers)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

    @classmethod
    def on(cls, name: str, monkeypatch: pytest.MonkeyPatch) -> Warnings:
        handler = cls()
        logger = logging.getLogger(name)
        monkeypatch.setattr(logger, "handlers", [*logger.handlers, handler])
        return handler


def position(log: list[RecordedEvent], kind: type, **fields: object) -> int:
    found = [
        r.position
        for r in log
        if isinstance(r.event, kind) and all(getattr(r.event, k) == v for k, v in fields.items())
    ]
    assert len(found) == 1, f"{len(found)} {kind.__name__} {fields} in the log"
    return found[0]


async def test_a_put_manifest_swap_lets_the_in_flight_stream_finish_on_v1_and_runs_a_waiting_request_on_v2(
    nats_url: str,
    nrt_home: Path,
    database_url: str,
    event_store: EventStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    contracts = tmp_path / "contracts"  # a model of its own (not a shared copy): v2 really loads it
    shutil.copytree((nrt_home / "models" / "tiny-llama").resolve(), contracts)
    async with start_stack(nats_url, "tiny-support.yaml", edit=(V1_DRAIN, DRAIN), database_url=database_url) as stack:
        assert stack.cluster_state is not None
        controller = stack.cluster_state.controller
        client = stack.client()
        hold = LastChunkHold("billing")
        hold.install(stack.worker, monkeypatch)
        worker_warnings = Warnings.on("nrt.worker", monkeypatch)
        try:
            # v1 serves a streaming request, which is in flight: all but its last chunk generated
            stream = await client.chat.completions.create(
                model="billing", messages=user("hi"), stream=True, max_tokens=64
            )
            first = await anext(aiter(stream))
            old_id = first.id.removeprefix("chatcmpl-")
            await asyncio.wait_for(hold.reached.wait(), 10)
            await controller.wait_for(lambda s: s.in_flight_under(1) == 1, within=10)

            # the swap to v2, which adds 'contracts': loaded and warmed while v1 serves, then the drain
            v2 = with_specialist(stack.manifest.text, "contracts", str(contracts))
            started = time.perf_counter()
            put = asyncio.create_task(put_manifest(stack, v2))
            await controller.wait_for(lambda s: s.draining, within=30)
            assert controller.cluster.models["contracts"].tiers == {WORKER: "standby"}
            await until(lambda: stack.gate().swapping)

            # a new request waits for the swap up to drain.admission_wait (2s), then gets 503 with Retry-After
            asked = time.perf_counter()
            with pytest.raises(openai.APIStatusError) as refused:
                await client.chat.completions.create(model="router", messages=user(BILLING))
            assert time.perf_counter() - asked >= 1.9  # waited out admission_wait
            assert (refused.value.status_code, refused.value.code) == (503, "manifest_swap_in_progress")
            assert refused.value.response.headers["retry-after"] == "2"

            # another one waits, to the model v2 adds; the swap waits for the in-flight stream
            waiting = asyncio.create_task(
                client.chat.completions.with_raw_response.create(model="contracts", messages=user("hi"))
            )
            await asyncio.sleep(0.3)
            assert not waiting.done()
            assert not put.done()
        finally:
            hold.release.set()

        # the in-flight stream completes on v1 ...
        rest = [c async for c in stream]
        assert rest[-1].choices[0].finish_reason in ("length", "stop")
        assert (rest[-1].model_extra or {})["nrt"]["manifest_version"] == 1
        # ... which lets the swap cut over; then the waiting request runs on v2
        response = await asyncio.wait_for(waiting, 10)
        new_id = response.headers["x-nrt-request-id"]
        body = response.http_response.json()
        assert body["nrt"]["manifest_version"] == 2
        assert body["nrt"]["final_model"] == "contracts"
        # cluster_state promoted the standby model for it under v2 (not refusing it as unknown under v1)
        assert not [m for m in worker_warnings.messages if "did not promote" in m], worker_warnings.messages
        reply = await asyncio.wait_for(put, 30)
        elapsed = time.perf_counter() - started
        assert reply.status_code == 200, reply.text
        result = reply.json()
        assert (result["from_version"], result["to_version"], result["outcome"]) == (1, 2, "applied")
        assert result["warmed"] == ["contracts"]
        assert result["abandoned"] == 0
        async with stack.http() as http:
            assert (await http.get("/v1/manifest")).json()["version"] == 2
        await controller.wait_for(lambda s: s.in_flight_under(2) == 0 and not s.draining, within=10)

    # every step is an event, in this order in the PostgreSQL log
    log = [r async for r in event_store.read_positions()]
    placed = position(log, ModelPlaced, model_id="contracts", manifest_version=2)
    warmed = position(log, TierChanged, model_id="contracts", to_tier="standby")
    old_admitted = position(log, RequestAdmitted, request_id=old_id, manifest_version=1)
    drain = position(log, DrainStarted, from_version=1, to_version=2, in_flight=1)
    old_done = position(log, RequestCompleted, request_id=old_id, manifest_version=1)
    cut = position(log, ManifestApplied, version=2)
    promoted = position(log, TierChanged, model_id="contracts", from_tier="standby", to_tier="resident")
    drained = position(log, DrainCompleted, from_version=1, to_version=2, outcome="drained", abandoned=0)
    new_admitted = position(log, RequestAdmitted, request_id=new_id, manifest_version=2)
    new_done = position(log, RequestCompleted, request_id=new_id, manifest_version=2, model_id="contracts")
    assert placed < warmed < drain
    assert old_admitted < drain < old_done < cut < drained
    assert cut < new_admitted < new_done  # admitted once the gateway saw the cut-over (DrainCompleted races it)
    assert cut < promoted  # on demand, for the waiting request
    assert not [r for r in log if isinstance(r.event, RequestAdmitted) and r.position in range(drain, cut)]
    steps = sorted(
        [
            (placed, "ModelPlaced contracts"),
            (warmed, "TierChanged contracts standby"),
            (old_admitted, "RequestAdmitted old v1"),
            (drain, "DrainStarted 1->2 in_flight=1"),
            (old_done, "RequestCompleted old v1"),
            (cut, "ManifestApplied v2"),
            (promoted, "TierChanged contracts resident"),
            (drained, "DrainCompleted drained"),
            (new_admitted, "RequestAdmitted new v2"),
            (new_done, "RequestCompleted new v2"),
        ]
    )
    print(
        f"\nswap v1->v2 in {elapsed:.2f}s (drain {result['drained_ms']:.0f} ms): "
        + ", ".join(f"#{p} {what}" for p, what in steps)
    )


async def test_a_put_manifest_whose_added_model_cannot_load_answers_the_error_and_v1_keeps_serving(
    nats_url: str, nrt_home: Path, database_url: str, event_store: EventStore
) -> None:
    async with start_stack(nats_url, "tiny-support.yaml", database_url=database_url) as stack:
        assert stack.cluster_state is not None
        reply = await put_manifest(stack, with_specialist(stack.manifest.text, "broken", "/nonexistent/export"))
        assert reply.status_code == 400, reply.text
        error = reply.json()["error"]
        assert set(error) >= {"message", "type", "param", "code"}
        assert (error["type"], error["code"]) == ("invalid_request_error", "swap_failed")
        assert "could not load broken for manifest v2" in error["message"]
        assert "manifest v1 is still serving" in error["message"]
        # v1 keeps serving
        response = await stack.client().chat.completions.with_raw_response.create(
            model="router", messages=user(BILLING)
        )
        assert response.http_response.json()["nrt"]["manifest_version"] == 1
        async with stack.http() as http:
            assert (await http.get("/v1/manifest")).json()["version"] == 1
        assert stack.cluster_state.controller.cluster.manifest_version == 1
        assert not stack.gate().swapping
    assert await event_store.query(types=["DrainStarted", "DrainCompleted"]) == []
    assert [r.event.version for r in await event_store.query(types=["ManifestApplied"])] == [1]  # type: ignore[attr-defined]


async def test_a_put_manifest_that_changes_the_router_drains_then_reloads_it_in_router_svc(
    nats_url: str,
    nrt_home: Path,
    database_url: str,
    event_store: EventStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    router_v2 = tmp_path / "router-v2"  # the tiny encoder again, from a source of its own: a router change
    shutil.copytree((nrt_home / "models" / "tiny-bert").resolve(), router_v2)
    drain = (V1_DRAIN, "drain: {timeout: 20s, admission_wait: 10s}")
    async with start_stack(nats_url, "tiny-support.yaml", edit=drain, database_url=database_url) as stack:
        assert stack.cluster_state is not None
        controller = stack.cluster_state.controller
        client = stack.client()
        old_router = stack.manifest.router.source
        assert stack.router_host.host.hosted["router"].source == old_router  # router_svc holds v1's router
        hold = LastChunkHold("billing")
        hold.install(stack.worker, monkeypatch)
        try:
            # a routed request in flight under v1: classified by v1's router, its answer not finished
            stream = await client.chat.completions.create(
                model="router", messages=user(BILLING), stream=True, max_tokens=64
            )
            first = await anext(aiter(stream))
            old_id = first.id.removeprefix("chatcmpl-")
            await asyncio.wait_for(hold.reached.wait(), 10)
            await controller.wait_for(lambda s: s.in_flight_under(1) == 1, within=10)
            v2 = stack.manifest.text.replace(old_router, str(router_v2))
            put = asyncio.create_task(put_manifest(stack, v2))
            await controller.wait_for(lambda s: s.draining, within=30)
            await until(lambda: stack.gate().swapping)
            await asyncio.sleep(0.3)
            # the drain waits for the request: v1's router is still there, resident
            assert stack.router_host.host.hosted["router"].source == old_router
            assert controller.cluster.models["router"].tiers == {ROUTER_HOST: "resident"}
            assert not put.done()
        finally:
            hold.release.set()
        rest = [c async for c in stream]
        assert (rest[-1].model_extra or {})["nrt"]["manifest_version"] == 1
        # drained: router_svc reloads the router from its new source, then the cut-over; a request
        # admitted meanwhile waits (admission_wait) and is routed by the new router under v2
        waiting = asyncio.create_task(
            client.chat.completions.with_raw_response.create(model="router", messages=user(BILLING))
        )
        reply = await asyncio.wait_for(put, 30)
        assert reply.status_code == 200, reply.text
        result = reply.json()
        assert (result["from_version"], result["to_version"], result["outcome"]) == (1, 2, "applied")
        assert result["warmed"] == ["router"]
        response = await asyncio.wait_for(waiting, 15)
        nrt = response.http_response.json()["nrt"]
        assert (nrt["manifest_version"], nrt["routed"], nrt["final_model"]) == (2, True, "billing")
        assert nrt["hops"][0]["worker_id"] == ROUTER_HOST
        assert stack.router_host.host.hosted["router"].source == str(router_v2)
        state = await controller.wait_for(lambda s: s.manifest_version == 2 and not s.draining, within=10)
        assert state.models["router"].artifact == str(router_v2)
        assert state.models["router"].tiers == {ROUTER_HOST: "resident"}
        new_id = response.headers["x-nrt-request-id"]

    # in the log: the drain held by the v1 request, then the reload on router_svc, then the cut-over
    log = [r async for r in event_store.read_positions()]
    drain_started = position(log, DrainStarted, from_version=1, to_version=2, in_flight=1)
    old_done = position(log, RequestCompleted, request_id=old_id, manifest_version=1)
    unloaded = position(log, TierChanged, model_id="router", to_tier="unloaded", reason="manifest_swap")
    placed = position(log, ModelPlaced, model_id="router", manifest_version=2)
    resident = position(log, TierChanged, model_id="router", to_tier="resident", reason="manifest_swap")
    cut = position(log, ManifestApplied, version=2)
    new_routed = position(log, RequestRouted, request_id=new_id, manifest_version=2)
    assert drain_started < old_done < unloaded < placed < resident < cut < new_routed
    router_tiers = [
        (r.event.worker_id, r.event.from_tier, r.event.to_tier, r.event.reason)
        for r in log
        if isinstance(r.event, TierChanged) and r.event.model_id == "router"
    ]
    assert router_tiers == [  # always on router_svc: placed at v1, then reloaded for v2
        (ROUTER_HOST, "unloaded", "standby", "placement"),
        (ROUTER_HOST, "standby", "resident", "placement"),
        (ROUTER_HOST, "resident", "unloaded", "manifest_swap"),
        (ROUTER_HOST, "unloaded", "standby", "manifest_swap"),
        (ROUTER_HOST, "standby", "resident", "manifest_swap"),
    ]
