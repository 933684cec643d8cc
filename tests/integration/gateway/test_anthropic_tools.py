"""Client tools on ``POST /v1/messages`` with the official ``anthropic`` client, on the running tiny stack:
``tool_choice`` any / tool / auto / none, ``tool_use`` blocks valid against the declared input schemas
(``toolu_`` ids, stop reason ``tool_use``), streamed as ``content_block_start`` + ``input_json_delta``
events that add up to the same input, and ``tool_result`` blocks that continue the conversation with the
session's KV cache reused."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import jsonschema
import pytest

from harness import API_KEY, Stack

pytestmark = pytest.mark.asyncio(loop_scope="module")

MODEL = "fallback"  # a plain chat template: the system message (the tools) and every turn are in its prompt
NUMBER = {"type": "integer", "minimum": 0, "maximum": 9}
CLOSED = {"additionalProperties": False}
ADD = {"type": "object", "properties": {"a": NUMBER, "b": NUMBER}, "required": ["a", "b"], **CLOSED}
LOOKUP = {"type": "object", "properties": {"id": {"type": "string", "maxLength": 4}}, "required": ["id"], **CLOSED}
TOOLS: Any = [
    {"name": "add", "description": "Add", "input_schema": ADD},
    {"name": "lookup", "input_schema": LOOKUP},
]
SCHEMAS = {"add": ADD, "lookup": LOOKUP}
USER: Any = [{"role": "user", "content": "add 2 and 3"}]


def client(stack: Stack) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=stack.base_url, api_key=API_KEY, max_retries=0)


def check_uses(content: Any, only: str | None = None) -> list[Any]:
    uses = [block for block in content if block.type == "tool_use"]
    assert uses
    for use in uses:
        assert use.id.startswith("toolu_")
        assert only is None or use.name == only
        jsonschema.validate(use.input, SCHEMAS[use.name])
    return uses


async def test_any_answers_with_tool_use_blocks_valid_against_their_schemas(stack: Stack) -> None:
    message = await client(stack).messages.create(
        model=MODEL, max_tokens=150, messages=USER, tools=TOOLS, tool_choice={"type": "any"}
    )
    assert message.stop_reason == "tool_use"
    check_uses(message.content)


async def test_a_named_tool_without_parallel_use_is_called_once(stack: Stack) -> None:
    message = await client(stack).messages.create(
        model=MODEL,
        max_tokens=150,
        messages=USER,
        tools=TOOLS,
        tool_choice={"type": "tool", "name": "lookup", "disable_parallel_tool_use": True},
    )
    assert message.stop_reason == "tool_use"
    assert len(check_uses(message.content, only="lookup")) == 1


async def test_none_and_auto_answer_text_or_valid_calls(stack: Stack) -> None:
    text = await client(stack).messages.create(
        model=MODEL, max_tokens=10, messages=USER, tools=TOOLS, tool_choice={"type": "none"}
    )
    assert [block.type for block in text.content] == ["text"]
    assert text.stop_reason in ("end_turn", "max_tokens")
    for question in ("one", "two", "three"):
        auto = await client(stack).messages.create(
            model=MODEL, max_tokens=60, messages=[{"role": "user", "content": question}], tools=TOOLS
        )
        if auto.stop_reason == "tool_use":
            check_uses(auto.content)
        else:
            assert all(block.type == "text" for block in auto.content)


async def test_streamed_input_json_deltas_add_up_to_the_same_input(stack: Stack) -> None:
    asked: Any = dict(model=MODEL, max_tokens=150, messages=USER, tools=TOOLS, tool_choice={"type": "any"})
    whole = await client(stack).messages.create(**asked)
    starts, partial = [], {}
    async with client(stack).messages.stream(**asked) as stream:
        async for event in stream:
            if event.type == "content_block_start" and event.content_block.type == "tool_use":
                starts.append((event.index, event.content_block.name))
                partial[event.index] = ""
            elif event.type == "content_block_delta" and event.delta.type == "input_json_delta":
                partial[event.index] += event.delta.partial_json
        final = await stream.get_final_message()
    assert starts
    assert final.stop_reason == "tool_use"
    streamed = [(b.name, b.input) for b in final.content if b.type == "tool_use"]  # the client's own accumulation
    assert streamed == [(b.name, b.input) for b in whole.content if b.type == "tool_use"]
    assert [name for _, name in starts] == [name for name, _ in streamed]


async def test_a_tool_result_continues_the_conversation_reusing_the_session_kv(stack: Stack) -> None:
    session = {"X-NRT-Session": "anthropic-tools"}
    asked: Any = dict(model=MODEL, tools=TOOLS[:1], extra_headers=session)
    first = await client(stack).messages.create(
        **asked,
        max_tokens=150,
        messages=USER,
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
    )
    uses = check_uses(first.content)
    history: Any = [
        *USER,
        {"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "5"} for use in uses]},
    ]
    second = await client(stack).messages.create(
        **asked, max_tokens=8, messages=history, tool_choice={"type": "none", "disable_parallel_tool_use": True}
    )
    assert [block.type for block in second.content] == ["text"]
    # input_tokens are the prompt tokens prefilled, cache_read_input_tokens those the session's KV (or a shared
    # prefix) gave: the second prompt holds the first turn, which its cache covers
    prompt = second.usage.input_tokens + (second.usage.cache_read_input_tokens or 0)
    assert prompt > first.usage.input_tokens + first.usage.output_tokens
    assert (second.usage.cache_read_input_tokens or 0) >= first.usage.input_tokens + first.usage.output_tokens - 1
    # the same conversation in OpenAI's shape is the same prompt (both write the calls as the model did): its
    # usage shows the first turn (the prompt and the call as the model wrote it) came from the session's KV
    cached = await stack.client().chat.completions.create(
        model=MODEL,
        messages=[
            *USER,
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": use.id,
                        "type": "function",
                        "function": {"name": use.name, "arguments": json.dumps(use.input)},
                    }
                    for use in uses
                ],
            },
            *[{"role": "tool", "tool_call_id": use.id, "content": "5"} for use in uses],
        ],
        tools=[{"type": "function", "function": {"name": "add", "description": "Add", "parameters": ADD}}],
        tool_choice="none",
        parallel_tool_calls=False,
        max_tokens=8,
        extra_headers=session,
    )
    usage = cached.usage
    assert usage is not None
    assert usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens >= first.usage.input_tokens + first.usage.output_tokens - 1
