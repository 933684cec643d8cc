"""One trace per request across the services; the generative router; manifest versions and swaps.
Each test runs its own stack in-process (real worker, router_svc, gateway, real NATS)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import openai
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from harness import apply_manifest, start_stack
from nrt.adapters.bus import rpc, subjects
from nrt.adapters.bus.errors import RemoteError
from nrt.adapters.bus.jetstream import EventPublisher
from nrt.core.events import DrainStarted, RequestAdmitted, RequestCompleted, RequestRouted
from nrt.core.protocol import ChatMessage, Dispatch, GenerateChunk, RouteRequest

BILLING = "I was charged twice for my order"


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


@pytest.mark.parametrize("stream", [False, True])
async def test_one_trace_per_request_with_a_span_per_hop(
    nats_url: str, nrt_home: Path, spans: InMemorySpanExporter, stream: bool
) -> None:
    async with start_stack(nats_url, "tiny-support.yaml") as stack:
        spans.clear()
        if stream:
            chunks = await stack.client().chat.completions.create(model="router", messages=user(BILLING), stream=True)
            _ = [c async for c in chunks]
        else:
            await stack.client().chat.completions.create(model="router", messages=user(BILLING))
        await asyncio.sleep(0.1)  # the worker's serve spans end right after its end frame
        finished = spans.get_finished_spans()
    gateway = next(s for s in finished if s.name == "POST /v1/chat/completions")
    trace_id = gateway.context.trace_id
    ours = {s.name: s for s in finished if s.context.trace_id == trace_id}
    assert gateway.parent is None
    assert gateway.kind is SpanKind.SERVER

    def parent_of(name: str) -> str:
        parent = ours[name].parent
        assert parent is not None, name
        return next(s.name for s in ours.values() if s.context.span_id == parent.span_id)

    # gateway -> router_svc (which classifies in its own process) -> the specialist on its worker
    assert parent_of("router_svc route") == "POST /v1/chat/completions"
    assert parent_of("router_svc classify router") == "router_svc route"
    assert parent_of("router_svc dispatch billing") == "router_svc route"
    assert parent_of("nats serve nrt.infer.billing") == "router_svc dispatch billing"
    # no NATS hop to the router model: it lives in router_svc
    assert not [name for name in ours if "nrt.infer.router" in name], sorted(ours)
    assert ours["router_svc route"].attributes is not None
    assert ours["router_svc route"].attributes["nrt.target"] == "billing"
    assert gateway.attributes is not None
    assert gateway.attributes["nrt.intent"] == "billing"
    # the gateway's span covers the whole answer, the streamed one included
    assert gateway.end_time is not None
    serve = ours["nats serve nrt.infer.billing"]
    assert serve.start_time is not None
    assert gateway.end_time >= serve.start_time


async def test_a_generative_router_only_picks_allowed_labels(nats_url: str, nrt_home: Path) -> None:
    async with start_stack(nats_url, "tiny-generative.yaml") as stack:
        for text in ("my invoice is wrong", "the app crashes", "hello"):
            response = await stack.client().chat.completions.with_raw_response.create(
                model="router", messages=user(text)
            )
            completion = response.parse()
            tool_calls = completion.choices[0].message.tool_calls
            assert tool_calls is not None
            arguments = json.loads(tool_calls[0].function.arguments)
            assert arguments["intent"] in ("billing", "technical")
            assert arguments["target"] == arguments["intent"] == completion.model
            nrt = response.http_response.json()["nrt"]
            assert set(nrt["scores"]) == {"billing", "technical"}  # log-likelihoods; "none of these" is no label
            best = max(nrt["scores"], key=nrt["scores"].get)
            assert arguments["intent"] == best  # threshold 0.0: the best label, however it fares against none
            assert 0.0 < nrt["confidence"] < 1.0  # P(best) / (P(best) + P(none))


async def test_without_a_fallback_an_unsure_router_answers_itself(nats_url: str, nrt_home: Path) -> None:
    unsure = ("confidence_threshold: 0.0", "confidence_threshold: 1.0")  # never sure enough
    async with start_stack(nats_url, "tiny-generative.yaml", edit=unsure) as stack:
        response = await stack.client().chat.completions.with_raw_response.create(model="router", messages=user("hi"))
        completion = response.parse()
        tool_calls = completion.choices[0].message.tool_calls
        assert tool_calls is not None
        assert json.loads(tool_calls[0].function.arguments) == {"intent": None, "target": "router"}
        assert completion.model == "router"
        assert completion.choices[0].message.content
        nrt = response.http_response.json()["nrt"]
        assert [h["model"] for h in nrt["hops"]] == ["router", "router"]
        assert "(entry model:" in nrt["rule"]


async def test_router_svc_routes_under_the_admitted_version(nats_url: str, nrt_home: Path) -> None:
    async with start_stack(nats_url, "tiny-support.yaml") as stack:
        fixed = stack.manifest.text.replace("specialists.{intent}", "specialists.technical")
        await apply_manifest(stack.nc, fixed, version=2)

        async def route(version: int) -> Dispatch:
            request = RouteRequest(
                request_id=f"v{version}",
                manifest_version=version,
                model="router",
                messages=(ChatMessage("user", BILLING),),
            )
            frames = rpc.stream(stack.nc, subjects.ROUTE, request, GenerateChunk, first_timeout=5, idle_timeout=5)
            first = await anext(frames)  # the first chunk of the answer carries router_svc's decision
            await frames.aclose()
            assert first.route is not None
            return first.route

        assert (await route(1)).target == "billing"  # admitted under v1: intent dispatch
        assert (await route(2)).target == "technical"  # admitted under v2: the fixed route
        with pytest.raises(RemoteError) as caught:
            await route(7)
        assert caught.value.code == "manifest_unknown"
        assert caught.value.status == 503
        assert "manifest version 7 is not known to router_svc (known versions: 1, 2)" in caught.value.message


async def test_a_manifest_swap_holds_new_requests_and_keeps_in_flight_ones_on_their_version(
    nats_url: str, nrt_home: Path
) -> None:
    async with start_stack(nats_url, "tiny-support.yaml") as stack:
        client = stack.client()
        publisher = EventPublisher(stack.nc)
        # an in-flight request admitted under v1 ...
        stream = await client.chat.completions.create(model="billing", messages=user("hi"), stream=True, max_tokens=300)
        first = await anext(aiter(stream))
        # ... then a swap to v2 starts: new requests wait for it
        await publisher.publish(DrainStarted(from_version=1, to_version=2, in_flight=1, timeout_s=5))
        await asyncio.sleep(0.1)
        waiting = asyncio.create_task(
            client.chat.completions.with_raw_response.create(model="router", messages=user(BILLING))
        )
        rest = [c async for c in stream]
        assert rest[-1].choices[0].finish_reason == "length"
        assert (rest[-1].model_extra or {})["nrt"]["manifest_version"] == 1
        await asyncio.sleep(0.2)
        assert not waiting.done()
        await apply_manifest(stack.nc, stack.manifest.text, version=2)  # the cut-over
        response = await asyncio.wait_for(waiting, 5)
        assert response.http_response.json()["nrt"]["manifest_version"] == 2
        new_events = await stack.events(response.headers["x-nrt-request-id"], until=3)
        assert [type(e) for e in new_events] == [RequestAdmitted, RequestRouted, RequestCompleted]
        assert {e.manifest_version for e in new_events} == {2}  # type: ignore[attr-defined]
        old = [
            e
            for e in await stack.events(until=1)
            if getattr(e, "request_id", None) == first.id.removeprefix("chatcmpl-")
        ]
        assert {e.manifest_version for e in old} == {1}  # type: ignore[attr-defined]
        assert isinstance(old[-1], RequestCompleted)
        # a swap that outlasts drain.admission_wait (1s): 503 with Retry-After
        await publisher.publish(DrainStarted(from_version=2, to_version=3, in_flight=0, timeout_s=5))
        await asyncio.sleep(0.1)
        with pytest.raises(openai.APIStatusError) as caught:
            await client.chat.completions.create(model="router", messages=user(BILLING))
        assert caught.value.status_code == 503
        assert caught.value.code == "manifest_swap_in_progress"
        assert caught.value.response.headers["retry-after"] == "1"
