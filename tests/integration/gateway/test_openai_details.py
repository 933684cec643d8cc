"""OpenAI details a client relies on, with the official ``openai`` client on the running stack:
``n`` > 1 and client ``tools`` are clear 400s, ``stream_options.include_usage`` ends the stream
with a usage chunk, and ``seed`` makes a sampled answer reproducible."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import pytest

from harness import Stack

pytestmark = pytest.mark.asyncio(loop_scope="module")

BILLING = "I was charged twice for my order"
WEATHER_TOOL = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}},
}


def user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


async def test_n_above_one_is_a_400_naming_n(stack: Stack) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await stack.client().chat.completions.create(model="router", messages=user("hi"), n=2)
    assert caught.value.param == "n"
    assert "'n' must be 1, got 2" in caught.value.message


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"functions": [WEATHER_TOOL["function"]]}, "functions"),
        ({"functions": [WEATHER_TOOL["function"]], "stream": True}, "functions"),
    ],
)
async def test_deprecated_functions_are_refused_not_ignored(stack: Stack, fields: dict[str, Any], param: str) -> None:
    """(``tools`` are honoured: ``test_client_tools.py``.)"""
    with pytest.raises(openai.BadRequestError) as caught:
        await stack.client().chat.completions.create(model="router", messages=user("hi"), **fields)
    assert caught.value.param == param
    assert caught.value.code == "unsupported_parameter"
    assert f"'{param}' is not supported" in caught.value.message


async def test_an_empty_tools_list_is_no_tools(stack: Stack) -> None:
    completion = await stack.client().chat.completions.create(
        model="billing", messages=user("hi"), max_tokens=2, tools=[]
    )
    assert completion.choices[0].message.content


async def test_include_usage_ends_the_stream_with_a_usage_chunk(stack: Stack) -> None:
    stream = await stack.client().chat.completions.create(
        model="router",
        messages=user(BILLING),
        max_tokens=3,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    last, closing = chunks[-1], chunks[-2]
    assert last.choices == []
    assert last.usage is not None
    assert last.usage.completion_tokens == 3
    assert last.usage.total_tokens == last.usage.prompt_tokens + 3
    assert closing.choices[0].finish_reason == "length"
    assert all(chunk.usage is None for chunk in chunks[:-1])


async def sampled(stack: Stack, model: str, seed: int | None, stream: bool = False) -> str:
    client = stack.client()
    if stream:
        chunks = await client.chat.completions.create(
            model=model, messages=user(BILLING), max_tokens=8, temperature=1.0, seed=seed, stream=True
        )
        return "".join([chunk.choices[0].delta.content or "" async for chunk in chunks if chunk.choices])
    completion = await client.chat.completions.create(
        model=model, messages=user(BILLING), max_tokens=8, temperature=1.0, seed=seed
    )
    return completion.choices[0].message.content or ""


@pytest.mark.parametrize("model", ["billing", "router"])
async def test_a_seed_makes_a_sampled_answer_reproducible(stack: Stack, model: str) -> None:
    first = await sampled(stack, model, seed=1234)
    # alone, streamed, and batched with other requests on the worker: the same text
    again = await asyncio.gather(
        sampled(stack, model, seed=1234),
        sampled(stack, model, seed=1234, stream=True),
        sampled(stack, model, seed=99),
        sampled(stack, model, seed=None),
    )
    assert first
    assert again[0] == first
    assert again[1] == first
    others = {await sampled(stack, model, seed=seed) for seed in (1, 2, 3)}
    assert len(others | {first, again[2]}) > 1  # other seeds sample other answers
