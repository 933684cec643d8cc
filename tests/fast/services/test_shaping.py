"""Shaping frames as OpenAI responses (pure); the official client's types accept every shape."""

from __future__ import annotations

import json

import msgspec
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from api_gateway.errors import ApiError
from api_gateway.shaping import SSE_DONE, TOOL_NAME, Transcript, sse, sse_error
from nrt.adapters.inference.structs import Timings, Usage
from nrt.core.protocol import Dispatch, GenerateChunk

WALL = 1_000_000.0  # unix time the gateway received the request (the perf counter read 10.0)


def transcript(routed: bool = True) -> Transcript:
    """A request that took 25 ms at the gateway; the services' stamps are unix times (``WALL`` + ms)."""
    t = Transcript(
        request_id="abc123",
        model="router" if routed else "billing",
        routed=routed,
        manifest_version=3,
        session_id="s1",
        started=10.0,
        created=1700000000,
        started_wall=WALL,
    )
    t.sent_at, t.sent_wall = 10.001, WALL + 0.001
    route = (
        Dispatch(
            request_id="abc123",
            entry_model="router",
            intent="billing",
            target="billing",
            scores={"billing": 0.9, "technical": 0.2},
            router_ms=4.0,
            rule="router.output.intent -> specialists.{intent} => billing",
            confidence=0.9,
            router_worker_id="w1",
            router_compute_ms=3.0,
            received_at=WALL + 0.002,
            sent_at=WALL + 0.005,
        )
        if routed
        else None
    )
    first = GenerateChunk(
        request_id="abc123",
        model_id="billing",
        worker_id="w2",
        text="Hel",
        route=route,
        received_at=WALL + 0.006,
        sent_at=WALL + 0.008,
    )
    t.on_chunk(first, 10.010, WALL + 0.010)
    timings = Timings(
        queue_ms=0.1,
        prefill_ms=1,
        ttft_ms=2,
        decode_ms=3,
        decode_tokens_per_s=100,
        total_ms=5.5,
        prefilled_tokens=4,
        batch_size_max=1,
    )
    t.on_chunk(
        GenerateChunk(
            request_id="abc123",
            model_id="billing",
            worker_id="w2",
            text="lo",
            finish_reason="length",
            usage=Usage(prompt_tokens=4, completion_tokens=2, total_tokens=6, cached_tokens=1),
            timings=timings,
            received_at=WALL + 0.006,
            sent_at=WALL + 0.018,
        ),
        10.020,
        WALL + 0.020,
    )
    return t


def test_a_routed_completion_shows_the_router_hop_as_a_tool_call() -> None:
    body = msgspec.json.encode(transcript().completion(10.025))
    completion = ChatCompletion.model_validate_json(body)
    message = completion.choices[0].message
    assert message.content == "Hello"
    assert message.tool_calls is not None
    call = message.tool_calls[0]
    assert call.function.name == TOOL_NAME  # type: ignore[union-attr]
    assert json.loads(call.function.arguments) == {"intent": "billing", "target": "billing"}  # type: ignore[union-attr]
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens, completion.usage.total_tokens) == (
        4,
        2,
        6,
    )
    assert completion.model == "billing"
    nrt = json.loads(body)["nrt"]
    assert (nrt["entry_model"], nrt["final_model"], nrt["intent"], nrt["manifest_version"]) == (
        "router",
        "billing",
        "billing",
        3,
    )
    router, specialist = nrt["hops"]
    assert router == {
        "role": "router",
        "model": "router",
        "worker_id": "w1",
        "latency_ms": 4.0,
        "ttft_ms": None,
        "compute_ms": 3.0,
        "cold_start_ms": None,
        "own_ttft_ms": None,
    }
    assert specialist["ttft_ms"] == 5.0  # from router_svc's dispatch to the first chunk at the gateway
    assert specialist["latency_ms"] == 15.0
    assert specialist["compute_ms"] == 5.5
    assert specialist["own_ttft_ms"] == 2.0  # the worker's own: the request's arrival to its first chunk
    assert nrt["latency_ms"] == 25.0
    assert nrt["ttft_ms"] == 10.0
    # the same 25 ms, hop by hop: every transit and each service's own work
    assert nrt["breakdown"] == {
        "gateway_in_ms": 1.0,
        "to_router_ms": 1.0,
        "router_ms": 3.0,
        "to_worker_ms": 1.0,
        "worker_first_ms": 2.0,
        "worker_ms": 12.0,
        "first_back_ms": 2.0,
        "back_ms": 2.0,
        "gateway_out_ms": 5.0,
        "total_ms": 25.0,
    }


def test_a_direct_completion_has_no_tool_call() -> None:
    body = msgspec.json.encode(transcript(routed=False).completion(10.03))
    completion = ChatCompletion.model_validate_json(body)
    assert completion.choices[0].message.tool_calls is None
    nrt = json.loads(body)["nrt"]
    assert nrt["routed"] is False
    assert nrt["rule"] == "direct"
    assert [h["role"] for h in nrt["hops"]] == ["specialist"]
    assert nrt["hops"][0]["ttft_ms"] == 9.0  # from the moment the request was sent
    breakdown = nrt["breakdown"]
    assert "to_router_ms" not in breakdown  # no router hop
    assert breakdown["to_worker_ms"] == 5.0  # gateway -> router_svc -> worker


def _events(raw: bytes) -> list[bytes]:
    assert raw.endswith(b"\n\n")
    return [event.removeprefix(b"data: ") for event in raw.split(b"\n\n")[:-1]]


def test_sse_chunks_are_lf_framed_openai_chunks() -> None:
    t = transcript()
    stream = (
        sse(t.opening_chunk())
        + sse(t.content_chunk("Hel"))
        + b"".join(sse(c) for c in t.closing_chunks(10.03, include_usage=False))
        + SSE_DONE
    )
    assert b"\r" not in stream
    events = _events(stream)
    assert events[-1] == b"[DONE]"
    chunks = [ChatCompletionChunk.model_validate_json(e) for e in events[:-1]]
    opening, content, closing = chunks
    assert opening.choices[0].delta.role == "assistant"
    assert opening.choices[0].delta.tool_calls is not None
    assert opening.choices[0].delta.tool_calls[0].function.name == TOOL_NAME  # type: ignore[union-attr]
    assert content.choices[0].delta.content == "Hel"
    assert closing.choices[0].finish_reason == "length"
    assert closing.usage is not None
    assert closing.usage.total_tokens == 6
    assert json.loads(events[2])["nrt"]["final_model"] == "billing"


def test_include_usage_adds_a_usage_chunk_without_choices() -> None:
    closing, usage = transcript().closing_chunks(10.03, include_usage=True)
    assert closing.usage is None
    parsed = ChatCompletionChunk.model_validate_json(sse(usage)[len(b"data: ") :])
    assert parsed.choices == []
    assert parsed.usage is not None
    assert parsed.usage.prompt_tokens == 4


def test_sse_error_events_carry_the_openai_error_shape() -> None:
    raw = sse_error(ApiError(504, "no next token from nrt.infer.billing within 5s", code="deadline_exceeded"))
    body = json.loads(_events(raw)[0])
    assert body == {
        "error": {
            "message": "no next token from nrt.infer.billing within 5s",
            "type": "server_error",
            "param": None,
            "code": "deadline_exceeded",
            "problems": None,
        }
    }
