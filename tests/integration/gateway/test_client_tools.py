"""Client tools on the running stack (gateway, router_svc, a worker, real NATS, the tiny random models),
with the official ``openai`` client: under ``required`` or a named function the answer is calls valid
against the declared schemas, under ``auto`` text or such calls, under ``none`` text; streamed deltas
add up to the same calls; a ``role: "tool"`` result continues the conversation, reusing the session's
KV cache; a routed request carries its tools to the specialist, and the router's hop is never handed
to the client as a call to run."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import openai
import pytest

from harness import Stack
from nrt.core.events import RequestAdmitted

pytestmark = pytest.mark.asyncio(loop_scope="module")

BILLING = "I was charged twice for my order"  # routes to the billing specialist
MODEL = "fallback"  # a plain chat template: the system message (the tools) and every turn are in its prompt

# small: the tiny model's context is 512 tokens of one byte each, and the tools are described in the prompt
NUMBER = {"type": "integer", "minimum": 0, "maximum": 9}
CLOSED = {"additionalProperties": False}
ADD = {"type": "object", "properties": {"a": NUMBER, "b": NUMBER}, "required": ["a", "b"], **CLOSED}
LOOKUP = {"type": "object", "properties": {"id": {"type": "string", "maxLength": 4}}, "required": ["id"], **CLOSED}
TOOLS: Any = [
    {"type": "function", "function": {"name": "add", "description": "Add", "parameters": ADD}},
    {"type": "function", "function": {"name": "lookup", "parameters": LOOKUP}},
]
SCHEMAS = {"add": ADD, "lookup": LOOKUP}


def user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


def check_calls(calls: Any, only: str | None = None) -> None:
    assert calls
    for call in calls:
        assert call.type == "function"
        assert call.id.startswith("call_")
        assert call.function.name in SCHEMAS
        assert only is None or call.function.name == only
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
    assert len({call.id for call in calls}) == len(calls)


async def test_required_answers_with_calls_valid_against_their_schemas(stack: Stack) -> None:
    completion = await stack.client().chat.completions.create(
        model=MODEL, messages=user("add 2 and 3"), tools=TOOLS, tool_choice="required", max_tokens=150
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert not choice.message.content
    check_calls(choice.message.tool_calls)


async def test_a_named_function_is_the_one_called_once_without_parallel_calls(stack: Stack) -> None:
    for seed in range(3):
        completion = await stack.client().chat.completions.create(
            model=MODEL,
            messages=user("where is my order?"),
            tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "lookup"}},
            parallel_tool_calls=False,
            max_tokens=150,
            temperature=1.0,
            seed=seed,
        )
        choice = completion.choices[0]
        assert choice.finish_reason == "tool_calls"
        check_calls(choice.message.tool_calls, only="lookup")
        assert choice.message.tool_calls is not None
        assert len(choice.message.tool_calls) == 1


async def test_none_answers_in_text(stack: Stack) -> None:
    completion = await stack.client().chat.completions.create(
        model=MODEL, messages=user("add 2 and 3"), tools=TOOLS, tool_choice="none", max_tokens=12
    )
    choice = completion.choices[0]
    assert choice.message.tool_calls is None
    assert choice.message.content
    assert choice.finish_reason in ("stop", "length")


async def test_auto_answers_with_text_or_valid_calls(stack: Stack) -> None:
    for seed in range(4):
        completion = await stack.client().chat.completions.create(
            model=MODEL,
            messages=user("add 2 and 3"),
            tools=TOOLS,
            max_tokens=40,
            temperature=1.0,
            seed=seed,
        )
        choice = completion.choices[0]
        if choice.message.tool_calls:
            check_calls(choice.message.tool_calls)
            assert choice.finish_reason in ("tool_calls", "length")
        else:
            assert choice.message.content is not None
            assert not choice.message.content.startswith("<tool_call>")


async def test_streamed_deltas_add_up_to_the_same_calls(stack: Stack) -> None:
    asked: Any = dict(
        model=MODEL, messages=user("add 2 and 3"), tools=TOOLS, tool_choice="required", max_tokens=150, seed=7
    )
    whole = (await stack.client().chat.completions.create(**asked)).choices[0]
    stream = await stack.client().chat.completions.create(**asked, stream=True)
    calls: dict[int, dict[str, str]] = {}
    finish, fragments = None, 0
    async for chunk in stream:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        assert not delta.content
        for piece in delta.tool_calls or ():
            fragments += 1
            call = calls.setdefault(piece.index, {"id": "", "name": "", "arguments": ""})
            if piece.id:
                call["id"] = piece.id
            if piece.function is not None:
                call["name"] += piece.function.name or ""
                call["arguments"] += piece.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls"
    assert fragments > len(calls)  # the arguments came in pieces
    assert whole.message.tool_calls is not None
    assert [(c["name"], c["arguments"]) for _, c in sorted(calls.items())] == [
        (c.function.name, c.function.arguments) for c in whole.message.tool_calls
    ]
    assert all(c["id"].startswith("call_") for c in calls.values())


async def test_the_official_stream_helper_accumulates_the_calls(stack: Stack) -> None:
    async with stack.client().chat.completions.stream(
        model=MODEL, messages=user("add 2 and 3"), tools=TOOLS, tool_choice="required", max_tokens=150
    ) as stream:
        async for _ in stream:
            pass
        final = await stream.get_final_completion()
    check_calls(final.choices[0].message.tool_calls)


async def test_a_tool_result_continues_the_conversation_reusing_the_session_kv(stack: Stack) -> None:
    client = stack.client()
    session = {"X-NRT-Session": "tools-two-turns"}
    history: list[Any] = user("add 2 and 3")
    first = await client.chat.completions.create(
        model=MODEL,
        messages=history,
        tools=TOOLS[:1],
        tool_choice="required",
        parallel_tool_calls=False,
        max_tokens=150,
        extra_headers=session,
    )
    message = first.choices[0].message
    check_calls(message.tool_calls)
    assert message.tool_calls is not None
    history.append(message.model_dump(exclude_none=True))
    for call in message.tool_calls:
        history.append({"role": "tool", "tool_call_id": call.id, "content": "5"})
    second = await client.chat.completions.create(
        model=MODEL,
        messages=history,
        tools=TOOLS[:1],
        tool_choice="none",
        parallel_tool_calls=False,
        max_tokens=8,
        extra_headers=session,
    )
    assert second.choices[0].message.content
    assert second.usage is not None
    assert second.usage.prompt_tokens_details is not None
    # the whole first turn (prompt and the calls the model wrote) is reused from the session's KV cache
    assert first.usage is not None
    assert second.usage.prompt_tokens_details.cached_tokens >= first.usage.total_tokens - 1


async def test_a_routed_request_carries_its_tools_and_hides_the_router_hop(stack: Stack) -> None:
    completion = await stack.client().chat.completions.create(
        model="router", messages=user(BILLING), tools=TOOLS, tool_choice="required", max_tokens=150
    )
    nrt = completion.model_extra["nrt"] if completion.model_extra else {}
    # classified, then forwarded with the tools (billing's manifest template shows only the question, not
    # the tools: its answer is still constrained to calls of them)
    assert nrt["final_model"] == "billing"
    calls = completion.choices[0].message.tool_calls
    check_calls(calls)  # the specialist's calls only: dispatch_to_specialist is not among them
    assert [hop["role"] for hop in nrt["hops"]] == ["router", "specialist"]
    # the log records that the answer was constrained, not the tools' text (this manifest records no prompts)
    events = await stack.events(nrt["request_id"], until=1)
    admitted = next(e for e in events if isinstance(e, RequestAdmitted))
    assert (admitted.constrained, admitted.constraint) == ("tools", None)


async def test_bad_tool_declarations_are_400s_naming_them(stack: Stack) -> None:
    client = stack.client()
    bad: list[tuple[dict[str, Any], str]] = [
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools[0].name"),
        ({"tools": [{"type": "custom", "custom": {"name": "x"}}]}, "tools[0].type"),
    ]
    for fields, param in bad:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(model=MODEL, messages=user("hi"), max_tokens=5, **fields)
        assert caught.value.param == param, fields
