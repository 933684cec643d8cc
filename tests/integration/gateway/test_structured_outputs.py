"""Structured outputs on the running stack (gateway, router_svc, a worker, real NATS, the tiny random
models): the official clients ask for a schema and get an answer that parses into it, routed or not,
streamed or not, beside free requests; a schema the engine cannot compile is a 400 naming
``response_format``."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Literal

import anthropic
import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from harness import API_KEY, Stack

pytestmark = pytest.mark.asyncio(loop_scope="module")

BILLING = "I was charged twice for my order"  # routes to the billing specialist (its own example)


class Ticket(BaseModel):
    """A pydantic model as an agent framework would declare it (bounded: the model is random)."""

    summary: str = Field(max_length=12)
    priority: Literal["low", "high"]
    amount: int = Field(ge=0, le=500)
    refund: bool
    tags: list[Literal["billing", "bug", "other"]] = Field(max_length=3)


SCHEMA = {
    "type": "object",
    "properties": {"code": {"type": "integer", "minimum": 100, "maximum": 999}, "ok": {"type": "boolean"}},
    "required": ["code", "ok"],
    "additionalProperties": False,
}
JSON_SCHEMA_FORMAT: Any = {"type": "json_schema", "json_schema": {"name": "status", "schema": SCHEMA, "strict": True}}


def user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


async def test_a_pydantic_model_through_parse(stack: Stack) -> None:
    completion = await stack.client().chat.completions.parse(
        model="billing", messages=user("Summarise my ticket"), response_format=Ticket, max_tokens=120
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "stop"
    assert isinstance(choice.message.parsed, Ticket)
    assert Ticket.model_validate_json(choice.message.content or "") == choice.message.parsed


async def test_a_routed_request_carries_its_schema_to_the_specialist(stack: Stack) -> None:
    completion = await stack.client().chat.completions.create(
        model="router", messages=user(BILLING), response_format=JSON_SCHEMA_FORMAT, max_tokens=60
    )
    nrt = completion.model_extra["nrt"] if completion.model_extra else {}
    assert nrt["final_model"] == "billing"  # router_svc classified it and forwarded the format
    jsonschema.validate(json.loads(completion.choices[0].message.content or ""), SCHEMA)


async def test_a_streamed_answer_parses_once_joined(stack: Stack) -> None:
    stream = await stack.client().chat.completions.create(
        model="billing", messages=user("status?"), response_format=JSON_SCHEMA_FORMAT, max_tokens=60, stream=True
    )
    parts = [chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices]
    assert len([p for p in parts if p]) > 1  # streamed token by token
    jsonschema.validate(json.loads("".join(parts)), SCHEMA)


async def test_json_object_and_a_free_request_side_by_side(stack: Stack) -> None:
    client = stack.client()
    constrained = [
        client.chat.completions.parse(
            model="billing",
            messages=user(f"ticket {i}"),
            response_format=Ticket,
            max_tokens=120,
            seed=i,
            temperature=0.7,
        )
        for i in range(3)
    ]
    free = client.chat.completions.create(model="billing", messages=user("tell me a story"), max_tokens=20)
    *parsed, story = await asyncio.gather(*constrained, free)
    assert all(isinstance(p.choices[0].message.parsed, Ticket) for p in parsed)
    assert story.choices[0].message.content  # free text, untouched by the others' grammar
    assert story.choices[0].finish_reason == "length"


@pytest.mark.parametrize("stream", [False, True])
async def test_a_schema_the_engine_cannot_compile_is_a_400_naming_response_format(stack: Stack, stream: bool) -> None:
    bad: Any = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "not": {}}}}
    with pytest.raises(openai.BadRequestError) as caught:
        await stack.client().chat.completions.create(
            model="billing", messages=user("hi"), response_format=bad, max_tokens=5, stream=stream
        )
    assert caught.value.param == "response_format"
    assert caught.value.code == "invalid_response_format"
    assert "Unimplemented keys" in caught.value.message


async def test_anthropic_output_config_format_on_messages(stack: Stack) -> None:
    client = anthropic.AsyncAnthropic(base_url=stack.base_url, api_key=API_KEY, max_retries=0)
    message = await client.messages.create(
        model="billing",
        max_tokens=60,
        messages=[{"role": "user", "content": "status?"}],
        output_config={"format": {"type": "json_schema", "schema": SCHEMA}},
    )
    assert message.stop_reason == "end_turn"
    text = "".join(block.text for block in message.content if block.type == "text")
    jsonschema.validate(json.loads(text), SCHEMA)
