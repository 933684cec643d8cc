"""Failures never hang a request: a dead worker, an unloaded model, router_svc gone, a model
nobody serves, the NATS server killed under a request. Each test runs its own stack (real worker,
router_svc, gateway, real NATS)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from api_gateway.settings import GatewaySettings
from harness import Stack, control, start_stack
from nrt.adapters.bus.broker import start_broker
from nrt.adapters.bus.follow import EventFollower
from nrt.adapters.infra.embedded_nats import EmbeddedNats
from nrt.core.events import RequestFailed
from nrt.core.routing import serving_workers

LONG = 400  # tokens: long enough to cut a stream in the middle


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def quick(nats_url: str) -> GatewaySettings:
    return GatewaySettings(nats_url=nats_url, route_timeout=2, idle_timeout=1, request_timeout=10)


async def failed_event(stack: Stack, request_id: str) -> RequestFailed:
    events = await stack.events(request_id, until=3)
    assert isinstance(events[-1], RequestFailed)
    return events[-1]


async def cut_mid_stream(stack: Stack, cut: Callable[[], Awaitable[None]]) -> tuple[str, openai.APIError, float]:
    """Stream a long answer from billing and ``cut`` it after two chunks: the request's id, the error
    that ended the stream and how long after the cut it came."""
    async with stack.client().chat.completions.with_streaming_response.create(
        model="billing", messages=user("hi"), stream=True, max_tokens=LONG
    ) as response:
        request_id = response.headers["x-nrt-request-id"]
        chunks = await response.parse()
        received, cut_at = 0, 0.0
        with pytest.raises(openai.APIError) as caught:
            async for _ in chunks:
                received += 1
                if received == 2:
                    cut_at = time.monotonic()
                    await cut()
    return request_id, caught.value, time.monotonic() - cut_at


async def test_a_worker_that_dies_mid_stream_ends_the_stream_with_an_error_event(nats_url: str, nrt_home: Path) -> None:
    async with start_stack(nats_url, "tiny-support.yaml", settings=quick(nats_url)) as stack:
        request_id, error, took = await cut_mid_stream(stack, stack.worker_nc.close)  # the worker is gone
        assert "no next token from worker w-gateway (nrt.infer.billing) within 1s" in error.message
        assert took < 5
        failed = await failed_event(stack, request_id)
        assert (failed.code, failed.status, failed.model_id) == ("deadline_exceeded", 504, "billing")


async def test_a_stream_in_flight_when_nats_dies_ends_at_once_and_the_stack_serves_once_it_is_back(
    tmp_path: Path, nrt_home: Path
) -> None:
    """A frame the server held when it died is gone: the gateway ends what was in flight on its
    disconnect (503 ``bus_lost``), not at the next deadline; the request is recorded once it can be."""
    server = EmbeddedNats(tmp_path / "nats").start()  # this test's own server: it is killed
    try:
        async with start_stack(server.url, "tiny-support.yaml", settings=quick(server.url)) as stack:

            async def kill() -> None:
                assert server.pid is not None
                os.kill(server.pid, signal.SIGKILL)

            request_id, error, took = await cut_mid_stream(stack, kill)
            assert took < 1.5  # not the 1 s inter-token deadline plus a wait
            assert "the gateway lost its connection to NATS" in error.message
            with pytest.raises(openai.APIStatusError) as refused:  # meanwhile: refused at once
                await stack.client().chat.completions.create(model="billing", messages=user("hi"), max_tokens=2)
            assert (refused.value.status_code, refused.value.code) == (503, "not_ready")
            assert refused.value.response.headers["retry-after"] == "1"

            server = EmbeddedNats(tmp_path / "nats", port=server.port).start()  # same port, same store
            answered, refusals = None, []
            deadline = time.monotonic() + 15
            while answered is None and time.monotonic() < deadline:
                try:
                    answered = await stack.client().chat.completions.create(
                        model="billing", messages=user("hi"), max_tokens=2
                    )
                except openai.APIStatusError as exc:  # until every service is back: a 503, at once
                    refusals.append(exc.status_code)
                    await asyncio.sleep(0.2)
            assert answered is not None, f"the stack did not serve again within 15 s: {refusals}"
            assert answered.choices[0].finish_reason == "length"
            assert set(refusals) <= {503}, refusals
            failed = await failed_event(stack, request_id)  # kept while the bus was down, sent after
            assert (failed.code, failed.status, failed.model_id) == ("bus_lost", 503, "billing")
    finally:
        server.stop()


async def test_a_worker_that_dies_mid_request_is_a_504(nats_url: str, nrt_home: Path) -> None:
    async with start_stack(nats_url, "tiny-support.yaml", settings=quick(nats_url)) as stack:
        client = stack.client()
        await stack.worker_nc.close()
        started = time.monotonic()
        with pytest.raises(openai.APIStatusError) as caught:
            await client.chat.completions.create(model="router", messages=user("hi"), max_tokens=LONG)
        waited = time.monotonic() - started
        # router_svc classifies in its own process and forwards to the fallback, which nobody serves any
        # more (the log does not know yet that the worker is gone): the first-frame deadline ends it
        assert 2 <= waited < 5  # route_timeout is 2s
        assert caught.value.status_code == 504
        assert caught.value.code == "deadline_exceeded"
        assert "no first reply from nrt.route or the model it routed the request to within 2s" in caught.value.message


async def test_a_model_unloaded_under_a_request_finishes_it_then_is_unavailable(nats_url: str, nrt_home: Path) -> None:
    async with start_stack(nats_url, "tiny-support.yaml", settings=quick(nats_url)) as stack:
        stream = await stack.client().chat.completions.create(
            model="billing", messages=user("hi"), stream=True, max_tokens=LONG
        )
        chunks = []
        async for chunk in stream:
            chunks.append(chunk)
            if len(chunks) == 2:
                await control(stack.nc, stack.worker.worker_id, action="unload", model_id="billing", reason="command")
        assert chunks[-1].choices[0].finish_reason == "length"  # the worker finished what it had started
        follower = EventFollower(await start_broker(stack.nats_url, "nrt-test-follower"))
        await follower.start()  # the unload is in the event log: the router sees it too
        await follower.wait_for(lambda s: not serving_workers(s, "billing"), within=5)
        await follower.broker.stop()
        started = time.monotonic()
        with pytest.raises(openai.APIStatusError) as caught:
            await stack.client().chat.completions.create(model="billing", messages=user("hi"))
        assert time.monotonic() - started < 1
        assert caught.value.status_code == 503
        assert caught.value.code == "model_unavailable"
        after = await stack.client().chat.completions.create(model="fallback", messages=user("hi"), max_tokens=2)
        assert after.choices[0].finish_reason == "length"  # the models sharing its weights still serve


async def test_router_svc_gone_is_a_fast_503_and_not_ready(nats_url: str, nrt_home: Path) -> None:
    async with start_stack(nats_url, "tiny-support.yaml", settings=quick(nats_url)) as stack:
        await stack.stop_router()
        started = time.monotonic()
        with pytest.raises(openai.APIStatusError) as caught:
            await stack.client().chat.completions.create(model="router", messages=user("hi"))
        assert time.monotonic() - started < 1
        assert caught.value.status_code == 503
        assert "nothing is serving nrt.route" in caught.value.message
        async with stack.http() as http:
            ready = await http.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["checks"]["router"] == "nothing is serving nrt.health.router_svc"
        assert ready.json()["checks"]["nats"] == "ok"


async def test_a_declared_model_that_no_worker_serves_is_a_503(nats_url: str, nrt_home: Path) -> None:
    loads = {"router": "resident", "billing": "resident", "fallback": "resident"}  # technical is placed nowhere
    async with start_stack(nats_url, "tiny-support.yaml", loads=loads, settings=quick(nats_url)) as stack:
        response = await stack.client().chat.completions.with_raw_response.create(
            model="router", messages=user("I was charged twice for my order")
        )
        assert response.parse().model == "billing"
        with pytest.raises(openai.APIStatusError) as caught:
            await stack.client().chat.completions.create(model="technical", messages=user("hi"))
        assert caught.value.status_code == 503
        assert "model 'technical' is not loaded on any live worker" in caught.value.message
        request_id = caught.value.response.headers["x-nrt-request-id"]
        failed = await failed_event(stack, request_id)
        assert (failed.code, failed.status) == ("model_unavailable", 503)
        async with stack.http() as http:
            ready = await http.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["checks"]["models"] == "no live worker serves technical yet"


UNUSABLE_BILLING = (
    "- id: billing\n      source: catalogue://tiny-llama",
    "- id: billing\n      source: hf://nobody/missing",
)


async def test_a_model_whose_source_cannot_be_resolved_is_named_by_readyz_and_in_the_cluster_state(
    nats_url: str, nrt_home: Path, database_url: str, hf_cache: Path
) -> None:
    # nothing is fetched (hf_cache: empty, offline; the worker runs in this process): unusable here
    async with (
        start_stack(
            nats_url, "tiny-support.yaml", database_url=database_url, edit=UNUSABLE_BILLING, partial=True
        ) as stack,
        stack.http() as http,
    ):
        ready = await answer_until(http, "/readyz", lambda body: bool(body.get("failed")))
        # cluster_state's fold of the PostgreSQL log carries the failure too: `nrt status` shows it
        cluster = await answer_until(
            http, "/v1/cluster", lambda body: "w-gateway" in body["models"].get("billing", {}).get("load_failures", {})
        )
    assert ready.status_code == 503
    body = ready.json()
    [billing] = body["failed"]
    assert (billing["model"], billing["required"], billing["worker_id"]) == ("billing", True, "w-gateway")
    assert billing["error"].startswith(
        "unresolvable_source: source hf://nobody/missing: not in the Hugging Face cache"
    ), billing["error"]
    assert body["checks"]["models"].startswith(f"billing could not be loaded on w-gateway: {billing['error']}")
    assert cluster.headers["x-nrt-state-source"] == "cluster_state"
    failure = cluster.json()["models"]["billing"]["load_failures"]["w-gateway"]
    assert (failure["artifact"], failure["error"]) == ("hf://nobody/missing", billing["error"])


async def answer_until(
    http: httpx.AsyncClient, path: str, done: Callable[[dict[str, Any]], bool], within: float = 30
) -> httpx.Response:
    """The first answer to ``GET path`` whose JSON body is ``done``, polled."""
    deadline = time.monotonic() + within
    while not done((answer := await http.get(path)).json()):
        assert time.monotonic() < deadline, f"{path} did not get there: {answer.text}"
        await asyncio.sleep(0.1)
    return answer
