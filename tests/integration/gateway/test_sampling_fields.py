"""OpenAI sampling fields honoured on the running tiny stack, through the official ``openai`` client:
``logit_bias`` (ids checked against the model's vocabulary), ``presence_penalty`` /
``frequency_penalty``, ``max_tokens`` / ``max_completion_tokens`` and ``stop``; rows with and
without them in one continuous batch on the worker."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import openai
import pytest
from tokenizers import Tokenizer

from harness import Stack

pytestmark = pytest.mark.asyncio(loop_scope="module")

PROMPT = [{"role": "user", "content": "I was charged twice for my order"}]


async def answer(stack: Stack, stream: bool = False, **fields: Any) -> tuple[str, str | None, int | None]:
    """(text, finish_reason, completion_tokens) of a greedy answer from the billing specialist."""
    fields.setdefault("max_tokens", 12)
    client = stack.client()
    if not stream:
        completion = await client.chat.completions.create(model="billing", messages=PROMPT, temperature=0.0, **fields)
        usage = completion.usage.completion_tokens if completion.usage else None
        return completion.choices[0].message.content or "", completion.choices[0].finish_reason, usage
    chunks = await client.chat.completions.create(
        model="billing", messages=PROMPT, temperature=0.0, stream=True, **fields
    )
    text, finish = "", None
    async for chunk in chunks:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    return text, finish, None


@pytest.fixture(scope="module")
def tokenizer(tiny_artifacts: Path) -> Tokenizer:
    return Tokenizer.from_file(str(tiny_artifacts / "tiny-llama" / "tokenizer.json"))


@pytest.mark.parametrize("stream", [False, True])
async def test_logit_bias_forces_a_token(stack: Stack, tokenizer: Tokenizer, stream: bool) -> None:
    token = tokenizer.token_to_id("x") if tokenizer.token_to_id("x") is not None else tokenizer.encode("x").ids[-1]
    plain, _, _ = await answer(stack, max_tokens=6)
    forced, finish, _ = await answer(stack, stream=stream, max_tokens=6, logit_bias={str(token): 100})
    assert forced == tokenizer.decode([token] * 6)
    assert forced != plain
    assert finish == "length"
    # -100 bans it: a greedy answer that would start with the token does not
    first = tokenizer.encode(plain, add_special_tokens=False).ids[0]
    banned, _, _ = await answer(stack, max_tokens=6, logit_bias={str(first): -100})
    assert tokenizer.encode(banned, add_special_tokens=False).ids[0] != first


async def test_a_logit_bias_id_outside_the_vocabulary_is_a_400_naming_it(stack: Stack, tokenizer: Tokenizer) -> None:
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    with pytest.raises(openai.BadRequestError) as caught:
        await answer(stack, logit_bias={"3": 1, str(size + 5): 2})
    assert caught.value.param == "logit_bias"
    assert f"token {size + 5}" in caught.value.message
    with pytest.raises(openai.BadRequestError) as bad_key:
        await answer(stack, logit_bias={"first": 2})
    assert bad_key.value.param == "logit_bias.first"


async def test_penalties_change_the_greedy_answer(stack: Stack) -> None:
    plain, _, _ = await answer(stack, max_tokens=24)
    for fields in ({"frequency_penalty": 2.0}, {"presence_penalty": 2.0}):
        penalised, _, _ = await answer(stack, max_tokens=24, **fields)
        again, _, _ = await answer(stack, max_tokens=24, **fields)
        assert penalised != plain, fields
        assert again == penalised  # deterministic: greedy over the same adjusted logits
        assert len(set(penalised)) >= len(set(plain)), (plain, penalised)  # repeats cost: no fewer distinct characters


async def test_rows_with_and_without_adjustments_share_a_batch(stack: Stack, tokenizer: Tokenizer) -> None:
    token = tokenizer.encode("x", add_special_tokens=False).ids[-1]
    alone = [
        await answer(stack, max_tokens=16),
        await answer(stack, max_tokens=16, frequency_penalty=2.0),
        await answer(stack, max_tokens=16, logit_bias={str(token): 100}),
    ]
    together = await asyncio.gather(
        answer(stack, max_tokens=16),
        answer(stack, max_tokens=16, frequency_penalty=2.0),
        answer(stack, max_tokens=16, logit_bias={str(token): 100}),
        answer(stack, max_tokens=16),
        answer(stack, stream=True, max_tokens=16, frequency_penalty=2.0),
    )
    assert [t[0] for t in together[:3]] == [t[0] for t in alone]
    assert together[3][0] == alone[0][0]
    assert together[4][0] == alone[1][0]
    assert together[2][0] == tokenizer.decode([token] * 16)


async def test_max_tokens_and_max_completion_tokens(stack: Stack) -> None:
    _, finish, used = await answer(stack, max_tokens=3, logit_bias={})
    assert (finish, used) == ("length", 3)
    _, finish, used = await answer(stack, max_tokens=9, max_completion_tokens=4)
    assert (finish, used) == ("length", 4)  # the newer name wins


async def test_stop_ends_the_answer(stack: Stack) -> None:
    full, _, _ = await answer(stack, max_tokens=16)
    assert len(full) >= 6, full
    stop = full[4:6]
    cut, finish, _ = await answer(stack, max_tokens=16, stop=[stop])
    assert finish == "stop"
    assert cut == full[: full.index(stop)]
