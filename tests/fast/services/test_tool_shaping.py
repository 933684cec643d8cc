"""A tool-calling answer shaped (pure): OpenAI's message.tool_calls and delta.tool_calls, Anthropic's
tool_use blocks and input_json_delta events; the official clients' types accept every shape, and the
router hop is never among the calls when the request declared tools."""

from __future__ import annotations

import json

import msgspec
from anthropic.types import Message as AnthropicMessage
from anthropic.types import RawMessageStreamEvent
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from pydantic import TypeAdapter

from api_gateway.anthropic_shaping import MessageShape
from api_gateway.shaping import Transcript
from nrt.core.protocol import Dispatch, GenerateChunk, ToolFunction, Tools, Usage

TOOLS = Tools(functions=(ToolFunction(name="add"), ToolFunction(name="f")))
ANSWER = ' <tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}\n<tool_call>{"name": "f", "arguments": {}}'
ROUTE = Dispatch(
    request_id="r1", entry_model="router", intent="billing", target="billing", scores={}, router_ms=1.0, rule="x"
)


def answered(pieces: list[str], tools: Tools | None = TOOLS) -> tuple[Transcript, list[str]]:
    t = Transcript(
        request_id="r1",
        model="router",
        routed=True,
        manifest_version=1,
        session_id=None,
        started=0.0,
        created=1,
        tools=tools,
    )
    for i, piece in enumerate(pieces):
        last = i == len(pieces) - 1
        chunk = GenerateChunk(
            request_id="r1",
            model_id="billing",
            worker_id="w",
            text=piece,
            route=ROUTE if i == 0 else None,
            finish_reason="stop" if last else None,
            usage=Usage(prompt_tokens=5, completion_tokens=9, total_tokens=14, cached_tokens=0) if last else None,
        )
        t.on_chunk(chunk, 0.1 * i, 0.1 * i)
    return t, pieces


def test_the_completion_holds_the_calls_and_not_the_router_hop() -> None:
    t, _ = answered([ANSWER])
    completion = ChatCompletion.model_validate_json(msgspec.json.encode(t.completion(1.0)))
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    assert choice.message.tool_calls is not None
    calls = [(c.id, c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls]  # type: ignore[union-attr]
    assert calls == [("call_r1_0", "add", {"a": 1, "b": 2}), ("call_r1_1", "f", {})]


def test_streamed_chunks_carry_the_calls_in_pieces() -> None:
    pieces = [ANSWER[i : i + 4] for i in range(0, len(ANSWER), 4)]
    t, _ = answered(pieces)
    chunks = [
        t.opening_chunk(),
        *(c for piece in pieces for c in t.content_chunks(piece)),
        *t.closing_chunks(1.0, False),
    ]
    parsed = [ChatCompletionChunk.model_validate_json(msgspec.json.encode(c)) for c in chunks]
    assert parsed[0].choices[0].delta.tool_calls is None  # no router hop among the calls
    names: dict[int, str] = {}
    arguments: dict[int, str] = {}
    for chunk in parsed:
        for call in chunk.choices[0].delta.tool_calls or ():
            if call.function is not None and call.function.name:
                names[call.index] = call.function.name
            arguments[call.index] = arguments.get(call.index, "") + (
                (call.function.arguments if call.function else "") or ""
            )
    assert names == {0: "add", 1: "f"}
    assert arguments == {0: '{"a": 1, "b": 2}', 1: "{}"}
    assert parsed[-1].choices[0].finish_reason == "tool_calls"
    assert not any(c.choices[0].delta.content for c in parsed)


def test_text_under_tools_is_text_and_the_hop_stays_hidden() -> None:
    t, pieces = answered([" Hello", " there"])
    chunks = [c for piece in pieces for c in t.content_chunks(piece)] + t.closing_chunks(1.0, False)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == " Hello there"
    completion = t.completion(1.0)
    assert completion.choices[0].message.content == " Hello there"
    assert completion.choices[0].message.tool_calls is None
    assert completion.choices[0].finish_reason == "stop"


def test_anthropic_tool_use_blocks_whole_and_streamed() -> None:
    t, _ = answered([ANSWER])
    message = AnthropicMessage.model_validate_json(msgspec.json.encode(MessageShape(t, ()).message(1.0)))
    assert message.stop_reason == "tool_use"
    assert [(b.type, getattr(b, "name", None), getattr(b, "input", None)) for b in message.content] == [
        ("tool_use", "add", {"a": 1, "b": 2}),
        ("tool_use", "f", {}),
    ]
    pieces = [ANSWER[i : i + 5] for i in range(0, len(ANSWER), 5)]
    t, _ = answered(pieces)
    shape = MessageShape(t, ())
    events = [*shape.opening(), *(e for piece in pieces for e in shape.deltas(piece)), *shape.closing(1.0)]
    adapter: TypeAdapter[RawMessageStreamEvent] = TypeAdapter(RawMessageStreamEvent)
    parsed = [adapter.validate_json(msgspec.json.encode(e)) for e in events]
    kinds = [e.type for e in parsed]
    assert kinds[0] == "message_start"
    assert kinds[-2:] == ["message_delta", "message_stop"]
    starts = [e for e in parsed if e.type == "content_block_start"]
    assert [(e.index, e.content_block.type) for e in starts] == [(0, "tool_use"), (1, "tool_use")]
    partial: dict[int, str] = {}
    for e in parsed:
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta":
            partial[e.index] = partial.get(e.index, "") + e.delta.partial_json
    assert {i: json.loads(text) for i, text in partial.items()} == {0: {"a": 1, "b": 2}, 1: {}}
    assert [e.index for e in parsed if e.type == "content_block_stop"] == [0, 1]
