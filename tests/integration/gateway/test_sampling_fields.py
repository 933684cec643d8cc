"""OpenAI sampling fields honoured on the running tiny stack, through the official ``openai`` client:
``logit_bias`` (ids checked against the model's vocabulary), ``presence_penalty`` /
``frequency_penalty``, ``max_tokens`` / ``max_completion_tokens`` and ``stop``; rows with and
without them in one continuous batch on the worker."""

from __future__ import annotations

import asyncio
import math
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


async def logprobs_of(stack: Stack, stream: bool, **fields: Any) -> tuple[str, list[Any]]:
    """(text, choices[0].logprobs.content) of a billing answer with ``logprobs``."""
    fields = {"max_tokens": 10, "temperature": 0.0, "logprobs": True, **fields}
    client = stack.client()
    if not stream:
        completion = await client.chat.completions.create(model="billing", messages=PROMPT, **fields)
        choice = completion.choices[0]
        assert choice.logprobs is not None
        assert choice.logprobs.content is not None
        return choice.message.content or "", list(choice.logprobs.content)
    chunks = await client.chat.completions.create(model="billing", messages=PROMPT, stream=True, **fields)
    text, content = "", []
    async for chunk in chunks:
        for choice in chunk.choices:
            text += choice.delta.content or ""
            if choice.logprobs is not None and choice.logprobs.content:
                content.extend(choice.logprobs.content)
    return text, content


@pytest.mark.parametrize("stream", [False, True])
async def test_logprobs_match_the_log_softmax(stack: Stack, stream: bool) -> None:
    plain, _, _ = await answer(stack, max_tokens=10)
    text, content = await logprobs_of(stack, stream, top_logprobs=5)
    assert text == plain  # asking for logprobs does not change the answer
    assert len(content) == 10
    # the tokens' bytes spell the answer (a byte of a character alone shows as U+FFFD in its token)
    assert bytes(b for entry in content for b in (entry.bytes or [])).decode("utf-8", "replace") == text
    for entry in content:
        assert entry.logprob <= 0.0
        tops = entry.top_logprobs
        assert len(tops) == 5
        assert [t.logprob for t in tops] == sorted((t.logprob for t in tops), reverse=True)
        assert sum(math.exp(t.logprob) for t in tops) <= 1.0 + 1e-4
        # greedy: the chosen token is the most likely one, with the same log-probability
        assert (tops[0].token, tops[0].logprob) == (entry.token, entry.logprob)
    # sampled: the chosen token is among the alternatives (all 20 of a byte-level vocabulary's likeliest), same value
    _, sampled = await logprobs_of(stack, stream, temperature=1.0, seed=7, top_logprobs=20)

    def same(top: Any, entry: Any) -> bool:  # by bytes too: every lone byte above 0x7f reads U+FFFD
        return bool(top.token == entry.token and top.bytes == entry.bytes)

    found = [t for entry in sampled for t in entry.top_logprobs if same(t, entry)]
    assert found
    for entry in sampled:
        for top in entry.top_logprobs:
            if same(top, entry):
                assert top.logprob == pytest.approx(entry.logprob, abs=1e-5)
    assert (await logprobs_of(stack, not stream, top_logprobs=5))[1] == content  # streamed == whole


async def test_logprobs_follow_logit_bias_and_come_without_alternatives_unless_asked(
    stack: Stack, tokenizer: Tokenizer
) -> None:
    token = tokenizer.encode("x", add_special_tokens=False).ids[-1]
    text, content = await logprobs_of(stack, False, max_tokens=4, logit_bias={str(token): 100})
    assert text == "xxxx"
    assert [entry.token for entry in content] == ["x"] * 4
    for entry in content:
        assert entry.logprob == pytest.approx(0.0, abs=1e-3)  # the log-softmax of a row the bias dominates
        assert entry.top_logprobs == []


async def test_rows_with_and_without_logprobs_share_a_batch(stack: Stack) -> None:
    alone = await logprobs_of(stack, False, top_logprobs=2)
    plain = await answer(stack, max_tokens=10)
    together = await asyncio.gather(
        logprobs_of(stack, False, top_logprobs=2),
        answer(stack, max_tokens=10),
        logprobs_of(stack, True, top_logprobs=2),
        answer(stack, max_tokens=10, frequency_penalty=1.0),
    )
    for text, content in (together[0], together[2]):  # the same tokens; values up to a batch's float rounding
        assert text == alone[0]
        assert [(e.token, e.bytes) for e in content] == [(e.token, e.bytes) for e in alone[1]]
        assert [e.logprob for e in content] == pytest.approx([e.logprob for e in alone[1]], abs=1e-3)
        assert len(content[0].top_logprobs) == 2
    assert together[1] == plain
    completion = await stack.client().chat.completions.create(
        model="billing", messages=PROMPT, max_tokens=3, temperature=0.0
    )
    assert completion.choices[0].logprobs is None  # not asked for: null, as OpenAI answers
