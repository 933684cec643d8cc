"""The routed request path on the bus: exactly three NATS transits, and the entry model answering itself.

A subject spy (the test's own NATS subscriptions) sees every message of a request's path:
``nrt.route`` (gateway -> router_svc), ``nrt.infer.>`` (router_svc -> a worker) and the
gateway's inbox (the worker -> the gateway). router_svc classifies in its own process, so
no message goes to the entry model's subject.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import openai
import pytest
from litestar import Litestar
from nats.aio.msg import Msg

from harness import ROUTER_HOST, Stack, start_stack
from nrt.adapters.bus import rpc, subjects
from nrt.adapters.bus.broker import ACCEPTED, FRAME
from nrt.adapters.bus.errors import RemoteError
from nrt.core.events import RequestFailed, RequestRouted
from nrt.core.protocol import GenerateChunk, GenerateRequest

BILLING = "I was charged twice for my order"  # billing's only example: confidence 1.0
UNSURE = "what is the weather like on Mars"  # below the 0.999 threshold: no intent


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def gateway_inboxes(stack: Stack) -> str:
    """The prefix of the gateway's request inboxes (one subject below it per request)."""
    app = stack.gateway.config.app
    assert isinstance(app, Litestar)
    prefix: str = app.state.cluster_link.require().inboxes.prefix
    return prefix


class Spy:
    """Every message on the request path's subjects, as (kind, subject), in arrival order."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def counts(self) -> Counter[str]:
        return Counter(kind for kind, _ in self.seen)


@pytest.fixture
async def spied(nats_url: str, nrt_home: Path) -> AsyncIterator[tuple[Stack, Spy]]:
    async with start_stack(nats_url, "tiny-support.yaml") as stack:
        spy = Spy()

        def record(kind: str):  # type: ignore[no-untyped-def]
            async def on_message(msg: Msg) -> None:
                accepted = (msg.headers or {}).get(FRAME) == ACCEPTED  # the worker says it took the request
                spy.seen.append((f"{kind} (accepted)" if accepted else kind, msg.subject))

            return on_message

        subscriptions = [
            await stack.nc.subscribe(subjects.ROUTE, cb=record("gateway -> router_svc")),
            await stack.nc.subscribe(f"{subjects.PREFIX}.infer.>", cb=record("router_svc -> worker")),
            await stack.nc.subscribe(f"{gateway_inboxes(stack)}.>", cb=record("worker -> gateway")),
        ]
        await stack.nc.flush()
        yield stack, spy
        for subscription in subscriptions:
            await subscription.unsubscribe()


async def settled(stack: Stack) -> None:
    """Every message of the request has reached the spy (NATS delivers a connection's messages in order)."""
    await stack.nc.flush()
    await asyncio.sleep(0.2)


async def test_a_routed_request_crosses_exactly_three_nats_transits(spied: tuple[Stack, Spy]) -> None:
    stack, spy = spied
    response = await stack.client().chat.completions.with_raw_response.create(model="router", messages=user(BILLING))
    await settled(stack)
    nrt = response.http_response.json()["nrt"]
    assert (nrt["routed"], nrt["intent"], nrt["final_model"]) == (True, "billing", "billing")
    # three transits, and the worker's accepted frame (where the request runs: the gateway ends it
    # at once if that worker is lost)
    assert [kind for kind, _ in spy.seen] == [
        "gateway -> router_svc",
        "router_svc -> worker",
        "worker -> gateway (accepted)",
        "worker -> gateway",
    ]
    assert spy.seen[1][1] == subjects.infer("billing")  # straight to the specialist: the router classified in-process
    assert not [s for _, s in spy.seen if s == subjects.infer("router")]
    # the answer's one chunk brought the router's decision back: no message of its own
    assert nrt["hops"][0]["worker_id"] == ROUTER_HOST


async def test_a_sessions_next_turn_goes_to_its_workers_own_subject(spied: tuple[Stack, Spy]) -> None:
    """Once router_svc's view of the log has the session's SessionTouched, its turns go to
    ``nrt.infer.<model>.<worker>`` of the worker holding its KV: still three transits."""
    stack, spy = spied
    session = {"X-NRT-Session": "transits-kv"}
    client = stack.client()
    await client.chat.completions.create(model="billing", messages=user(BILLING), extra_headers=session)  # type: ignore[arg-type]
    await settled(stack)
    assert spy.seen[1] == (
        "router_svc -> worker",
        subjects.infer("billing"),
    )  # nobody holds its KV yet: the queue group
    own = subjects.infer_at("billing", stack.worker.worker_id)
    deadline = asyncio.get_running_loop().time() + 10
    while True:  # the worker's SessionTouched reaches router_svc's fold a moment after the answer
        spy.seen.clear()
        await client.chat.completions.create(model="billing", messages=user(BILLING), extra_headers=session)  # type: ignore[arg-type]
        await settled(stack)
        if spy.seen[1][1] == own or asyncio.get_running_loop().time() > deadline:
            break
    assert [kind for kind, _ in spy.seen] == [
        "gateway -> router_svc",
        "router_svc -> worker",
        "worker -> gateway (accepted)",
        "worker -> gateway",
    ]
    assert spy.seen[1][1] == own


async def test_a_streamed_routed_answer_adds_only_its_chunks(spied: tuple[Stack, Spy]) -> None:
    stack, spy = spied
    stream = await stack.client().chat.completions.create(
        model="router", messages=user(BILLING), stream=True, max_tokens=5
    )
    chunks = [c async for c in stream]
    await settled(stack)
    counts = spy.counts()
    assert (counts["gateway -> router_svc"], counts["router_svc -> worker"]) == (1, 1)
    assert 1 <= counts["worker -> gateway"] <= 5  # one message per chunk of text, the last one marked as such
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) <= counts["worker -> gateway"]


async def test_an_unsure_routed_request_goes_to_the_fallback_in_three_transits_too(spied: tuple[Stack, Spy]) -> None:
    stack, spy = spied
    response = await stack.client().chat.completions.with_raw_response.create(model="router", messages=user(UNSURE))
    await settled(stack)
    assert response.http_response.json()["nrt"]["final_model"] == "fallback"
    assert [s for _, s in spy.seen][1] == subjects.infer("fallback")
    assert len(spy.seen) == 4  # three transits and the accepted frame


# -- the entry model answering itself ---------------------------------------------------------------


async def test_an_encoder_router_without_a_fallback_cannot_answer_itself_a_clear_400(
    nats_url: str, nrt_home: Path
) -> None:
    no_fallback = ("fallback:\n  source: catalogue://tiny-llama\n  tier: resident\n  generation: {max_tokens: 8}\n", "")
    async with start_stack(nats_url, "tiny-support.yaml", edit=no_fallback) as stack:
        assert stack.manifest.fallback is None
        # a confident request is routed as ever ...
        routed = await stack.client().chat.completions.create(model="router", messages=user(BILLING))
        assert routed.model == "billing"
        # ... an unsure one would be the entry model's to answer, which an encoder cannot: 400, saying why
        with pytest.raises(openai.BadRequestError) as caught:
            await stack.client().chat.completions.create(model="router", messages=user(UNSURE))
        error = caught.value
        assert error.code == "cannot_generate"
        assert "no intent was confident enough for this request" in error.message
        assert "the entry model 'router' cannot answer it itself" in error.message
        assert "model 'router' is an encoder; it can embed or classify, not generate" in error.message
        assert "Declare a fallback model in the manifest" in error.message
        request_id = error.response.headers["x-nrt-request-id"]
        events = await stack.events(request_id, until=3)
        routed_event = next(e for e in events if isinstance(e, RequestRouted))
        assert (routed_event.intent, routed_event.target) == (None, "router")
        failed = next(e for e in events if isinstance(e, RequestFailed))
        assert (failed.code, failed.status) == ("cannot_generate", 400)
        # the entry model's own subject, served by router_svc, says the same to a direct generate request
        ask = GenerateRequest(request_id="direct", model_id="router", manifest_version=1, prompt="hi")
        with pytest.raises(RemoteError) as direct:
            _ = [c async for c in rpc.stream(stack.nc, subjects.infer("router"), ask, GenerateChunk, 5, 5)]
        assert (direct.value.status, direct.value.code) == (400, "cannot_generate")


async def test_a_generative_router_answers_itself_from_router_svc(nats_url: str, nrt_home: Path) -> None:
    unsure = ("confidence_threshold: 0.0", "confidence_threshold: 1.0")  # never sure enough; no fallback
    async with start_stack(nats_url, "tiny-generative.yaml", edit=unsure) as stack:
        response = await stack.client().chat.completions.with_raw_response.create(model="router", messages=user("hi"))
        completion = response.parse()
        assert completion.model == "router"
        assert completion.choices[0].message.content
        nrt = response.http_response.json()["nrt"]
        assert [(h["model"], h["worker_id"]) for h in nrt["hops"]] == [("router", ROUTER_HOST), ("router", ROUTER_HOST)]
        tool_calls = completion.choices[0].message.tool_calls
        assert tool_calls is not None
        assert json.loads(tool_calls[0].function.arguments) == {"intent": None, "target": "router"}
