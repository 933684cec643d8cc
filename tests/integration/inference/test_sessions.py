"""Session KV caches: turn 2 prefills only its new tokens and produces the same output."""

from __future__ import annotations

import asyncio

from nrt.adapters.inference import BatchingGenerator, ChatMessage, Chunk, GenerationRequest, PromptTemplate
from nrt.adapters.inference.transcript import encode_prompt

TEMPLATE = PromptTemplate()


async def run(gen: BatchingGenerator, request: GenerationRequest) -> list[Chunk]:
    return [chunk async for chunk in gen.generate(request)]


def ids(chunks: list[Chunk]) -> list[int]:
    return [t for c in chunks for t in c.token_ids]


def text(chunks: list[Chunk]) -> str:
    return "".join(c.text for c in chunks)


def next_prompt_ids(gen: BatchingGenerator, session_id: str, prompt: str) -> tuple[int, ...]:
    """The ids the session's next turn runs for ``prompt`` (its last turn's ids where the text extends it)."""
    model = gen.model
    return tuple(encode_prompt(prompt, model.encode, model.tokenizer, gen.sessions.transcript(session_id)).ids)


async def test_turn_two_reuses_the_cache_with_identical_output(generator: BatchingGenerator) -> None:
    history = [
        ChatMessage("system", "You are a helpful assistant. " * 4),
        ChatMessage("user", "What is the capital of France?"),
    ]
    turn1 = await run(generator, GenerationRequest(prompt=TEMPLATE.render(history), max_tokens=12, session_id="s1"))
    held = generator.session_bytes("s1")
    assert held > 0
    usage = generator.session_usage()
    assert [u.session_id for u in usage] == ["s1"]
    assert usage[0].nbytes == held

    history += [ChatMessage("assistant", text(turn1)), ChatMessage("user", "And of Italy?")]
    prompt2 = TEMPLATE.render(history)
    cached = await run(generator, GenerationRequest(prompt=prompt2, max_tokens=12, session_id="s1"))
    fresh = await run(generator, GenerationRequest(prompt=prompt2, max_tokens=12))
    assert ids(cached) == ids(fresh)
    assert text(cached) == text(fresh)

    cached_usage, fresh_usage = cached[-1].usage, fresh[-1].usage
    assert cached_usage is not None
    assert fresh_usage is not None
    assert cached_usage.prompt_tokens == fresh_usage.prompt_tokens
    assert cached_usage.cached_tokens > 0
    assert fresh_usage.cached_tokens == 0
    cached_timings, fresh_timings = cached[-1].timings, fresh[-1].timings
    assert cached_timings is not None
    assert fresh_timings is not None
    assert cached_timings.prefilled_tokens == cached_usage.prompt_tokens - cached_usage.cached_tokens
    assert cached_timings.prefilled_tokens < fresh_timings.prefilled_tokens
    # The turn-1 prompt is a prefix of the turn-2 prompt: at least all of it is reused.
    assert cached_usage.cached_tokens >= len(generator.model.encode(TEMPLATE.render(history[:2])))


async def test_evict_session_frees_and_reports_bytes(generator: BatchingGenerator) -> None:
    prompt = "User: hi\nAssistant:"
    await run(generator, GenerationRequest(prompt=prompt, max_tokens=8, session_id="gone"))
    held = generator.session_bytes("gone")
    assert held > 0
    assert generator.evict_session("gone") == held
    assert generator.session_bytes("gone") == 0
    assert generator.evict_session("gone") == 0
    again = await run(generator, GenerationRequest(prompt=prompt + " more", max_tokens=4, session_id="gone"))
    assert again[-1].usage is not None
    assert again[-1].usage.cached_tokens == 0


async def test_cache_bytes_match_the_tokens_held(generator: BatchingGenerator) -> None:
    chunks = await run(generator, GenerationRequest(prompt="Hello world!", max_tokens=5, session_id="size"))
    usage = chunks[-1].usage
    assert usage is not None
    spec = generator.model.spec
    tokens = usage.prompt_tokens + usage.completion_tokens - 1  # the last token has no KV yet
    per_token = 2 * spec.num_layers * spec.num_kv_heads * spec.head_dim * 4
    assert generator.session_bytes("size") == tokens * per_token


async def test_sessions_are_isolated_from_each_other_and_from_concurrency(generator: BatchingGenerator) -> None:
    prompt_a = "User: tell me about foxes\nAssistant:"
    prompt_b = "User: 日本語\nAssistant:"
    a1, b1 = await asyncio.gather(
        run(generator, GenerationRequest(prompt=prompt_a, max_tokens=10, session_id="a")),
        run(generator, GenerationRequest(prompt=prompt_b, max_tokens=14, session_id="b")),
    )
    follow_a = prompt_a + text(a1) + "\nUser: more\nAssistant:"
    follow_b = prompt_b + text(b1) + "\nUser: more\nAssistant:"
    # each follow-up extends its own turn 1's text: it runs on turn 1's ids, then the new text's
    ids_a, ids_b = next_prompt_ids(generator, "a", follow_a), next_prompt_ids(generator, "b", follow_b)
    a2, b2 = await asyncio.gather(
        run(generator, GenerationRequest(prompt=follow_a, max_tokens=10, session_id="a")),
        run(generator, GenerationRequest(prompt=follow_b, max_tokens=10, session_id="b")),
    )
    a_fresh = await run(generator, GenerationRequest(prompt_ids=ids_a, max_tokens=10))
    b_fresh = await run(generator, GenerationRequest(prompt_ids=ids_b, max_tokens=10))
    assert ids(a2) == ids(a_fresh)
    assert ids(b2) == ids(b_fresh)
    for first, second in ((a1, a2), (b1, b2)):
        u1, u2 = first[-1].usage, second[-1].usage
        assert u1 is not None
        assert u2 is not None
        # all that turn 1's KV held was reused: its prompt and answer but the last token chosen,
        # which no forward pass ran yet
        assert u2.cached_tokens == u1.prompt_tokens + u1.completion_tokens - 1


async def test_a_diverging_turn_reuses_only_the_common_prefix(generator: BatchingGenerator) -> None:
    base = "System: be brief.\nUser: first question\nAssistant:"
    await run(generator, GenerationRequest(prompt=base, max_tokens=6, session_id="edit"))
    edited = "System: be brief.\nUser: a different question\nAssistant:"
    cached = await run(generator, GenerationRequest(prompt=edited, max_tokens=8, session_id="edit"))
    fresh = await run(generator, GenerationRequest(prompt=edited, max_tokens=8))
    assert ids(cached) == ids(fresh)
    usage = cached[-1].usage
    assert usage is not None
    assert 0 < usage.cached_tokens < usage.prompt_tokens
