"""Generation on the tiny real ONNX Llama: determinism, KV cache correctness, stops, limits."""

from __future__ import annotations

import numpy as np
import pytest

from nrt.adapters.inference import (
    BatchingGenerator,
    CausalLM,
    Chunk,
    ContextWindowError,
    GenerationRequest,
    InferenceError,
    bare_greedy,
)

PROMPT = "The quick brown fox"


async def collect(gen: BatchingGenerator, request: GenerationRequest) -> list[Chunk]:
    return [chunk async for chunk in gen.generate(request)]


def token_ids(chunks: list[Chunk]) -> list[int]:
    return [t for c in chunks for t in c.token_ids]


def text_of(chunks: list[Chunk]) -> str:
    return "".join(c.text for c in chunks)


async def test_greedy_is_deterministic_and_matches_the_bare_loop(
    generator: BatchingGenerator, tiny_llama: CausalLM
) -> None:
    request = GenerationRequest(prompt=PROMPT, max_tokens=24)
    first = await collect(generator, request)
    second = await collect(generator, request)
    assert token_ids(first) == token_ids(second)
    assert text_of(first) == text_of(second)
    assert token_ids(first) == bare_greedy(tiny_llama.session, tiny_llama.encode(PROMPT), 24)


async def test_prefill_plus_decode_equals_full_recompute(generator: BatchingGenerator, tiny_llama: CausalLM) -> None:
    prompt = tiny_llama.encode(PROMPT)
    generated = token_ids(await collect(generator, GenerationRequest(prompt=PROMPT, max_tokens=16)))
    # One forward pass over prompt + generated[:-1], no cache: logits at every position.
    sequence = np.array([prompt + generated[:-1]], dtype=np.int64)
    n = sequence.shape[1]
    session = tiny_llama.session
    feed: dict[str, np.ndarray] = {
        "input_ids": sequence,
        "attention_mask": np.ones((1, n), dtype=np.int64),
        "position_ids": np.arange(n, dtype=np.int64)[None, :],
    }
    for name in tiny_llama.signature.past_names:
        feed[name] = np.zeros((1, tiny_llama.spec.num_kv_heads, 0, tiny_llama.spec.head_dim), dtype=np.float32)
    (logits,) = session.run(["logits"], feed)
    recomputed = logits[0, len(prompt) - 1 :].argmax(axis=-1).tolist()
    assert recomputed == generated
    # And the incremental logits agree numerically with the full pass, step by step.
    past = tiny_llama.empty_past()
    step_logits, past = tiny_llama.forward(
        np.array([prompt], dtype=np.int64),
        np.ones((1, len(prompt)), dtype=np.int64),
        np.arange(len(prompt))[None, :],
        past,
    )
    np.testing.assert_allclose(step_logits[0], logits[0, len(prompt) - 1], rtol=1e-4, atol=1e-4)
    for i, token in enumerate(generated[:-1]):
        pos = len(prompt) + i
        step_logits, past = tiny_llama.forward(
            np.array([[token]], dtype=np.int64), np.ones((1, pos + 1), dtype=np.int64), np.array([[pos]]), past
        )
        np.testing.assert_allclose(step_logits[0], logits[0, pos], rtol=1e-4, atol=1e-4)


async def test_max_tokens_finishes_with_length_and_counts_usage(
    generator: BatchingGenerator, tiny_llama: CausalLM
) -> None:
    chunks = await collect(generator, GenerationRequest(prompt=PROMPT, max_tokens=7))
    last = chunks[-1]
    assert last.finish_reason == "length"
    assert all(c.finish_reason is None for c in chunks[:-1])
    assert last.usage is not None
    assert last.usage.completion_tokens == 7 == len(token_ids(chunks))
    assert last.usage.prompt_tokens == len(tiny_llama.encode(PROMPT))
    assert last.usage.total_tokens == last.usage.prompt_tokens + 7
    timings = last.timings
    assert timings is not None
    assert timings.ttft_ms > 0
    assert timings.prefill_ms > 0
    assert timings.decode_tokens_per_s > 0
    assert timings.prefilled_tokens == last.usage.prompt_tokens


async def test_max_tokens_one_finishes_at_prefill(generator: BatchingGenerator) -> None:
    chunks = await collect(generator, GenerationRequest(prompt=PROMPT, max_tokens=1))
    assert len(chunks) == 1
    assert chunks[0].finish_reason == "length"


async def test_stop_sequence_truncates_text_and_finishes_with_stop(generator: BatchingGenerator) -> None:
    free = text_of(await collect(generator, GenerationRequest(prompt=PROMPT, max_tokens=40)))
    stop = free[10:14]
    assert len(stop) == 4
    cut = free.find(stop)
    chunks = await collect(generator, GenerationRequest(prompt=PROMPT, max_tokens=40, stop=(stop, "never-appears")))
    assert chunks[-1].finish_reason == "stop"
    assert text_of(chunks) == free[:cut]
    assert stop not in text_of(chunks)


async def test_stop_sequence_not_reached_releases_held_text(generator: BatchingGenerator) -> None:
    free = await collect(generator, GenerationRequest(prompt=PROMPT, max_tokens=20))
    text = text_of(free)
    # A stop that starts like the end of the text but never completes: held, then flushed.
    stop = text[-2:] + "\x00never"
    chunks = await collect(generator, GenerationRequest(prompt=PROMPT, max_tokens=20, stop=(stop,)))
    assert chunks[-1].finish_reason == "length"
    assert text_of(chunks) == text


async def test_eos_finishes_with_stop_and_is_not_emitted(tiny_llama: CausalLM) -> None:
    expected = bare_greedy(tiny_llama.session, tiny_llama.encode(PROMPT), 10)
    # Treat the 5th greedy token as this model's EOS (the random model never picks the real one).
    model = CausalLM(tiny_llama.session, tiny_llama.artifact_dir, tiny_llama.tokenizer)
    model.eos_ids = frozenset({expected[4]})
    gen = BatchingGenerator(model)
    try:
        chunks = await collect(gen, GenerationRequest(prompt=PROMPT, max_tokens=10))
        assert chunks[-1].finish_reason == "stop"
        assert token_ids(chunks) == expected[:5]
        assert text_of(chunks) == tiny_llama.decode(expected[:4])
        ignored = await collect(gen, GenerationRequest(prompt=PROMPT, max_tokens=10, ignore_eos=True))
        assert token_ids(ignored) == expected
        assert ignored[-1].finish_reason == "length"
    finally:
        gen.close()


async def test_context_window_error_names_the_numbers(generator: BatchingGenerator, tiny_llama: CausalLM) -> None:
    n_prompt = len(tiny_llama.encode(PROMPT))
    context = tiny_llama.spec.context_length
    with pytest.raises(ContextWindowError) as info:
        await collect(generator, GenerationRequest(prompt=PROMPT, max_tokens=context))
    message = str(info.value)
    assert str(n_prompt) in message
    assert str(context) in message
    assert str(context - n_prompt) in message  # what max_tokens could be
    assert info.value.prompt_tokens == n_prompt
    long_prompt = tuple([1] + [300] * context)
    with pytest.raises(ContextWindowError, match="context window is 256 tokens"):
        await collect(generator, GenerationRequest(prompt_ids=long_prompt, max_tokens=1))
    # Without max_tokens the window is the limit: generation ends with "length" there.
    near_full = tuple([1] + [300] * (context - 4))
    chunks = await collect(generator, GenerationRequest(prompt_ids=near_full))
    assert chunks[-1].finish_reason == "length"
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens == context


async def test_invalid_requests_are_rejected(generator: BatchingGenerator) -> None:
    with pytest.raises(InferenceError, match="max_tokens"):
        await collect(generator, GenerationRequest(prompt=PROMPT, max_tokens=0))
    with pytest.raises(InferenceError, match="top_p"):
        await collect(generator, GenerationRequest(prompt=PROMPT, temperature=0.5, top_p=0.0))
    with pytest.raises(InferenceError, match="empty"):
        await collect(generator, GenerationRequest(prompt_ids=()))


async def test_seeded_sampling_is_reproducible(generator: BatchingGenerator) -> None:
    request = GenerationRequest(prompt=PROMPT, max_tokens=30, temperature=1.0, top_p=0.9, seed=1234)
    first = token_ids(await collect(generator, request))
    second = token_ids(await collect(generator, request))
    assert first == second
    other_seed = token_ids(
        await collect(generator, GenerationRequest(prompt=PROMPT, max_tokens=30, temperature=1.0, top_p=0.9, seed=99))
    )
    assert other_seed != first
    greedy = token_ids(await collect(generator, GenerationRequest(prompt=PROMPT, max_tokens=30)))
    assert greedy != first  # sampling actually sampled


async def test_top_p_restricts_to_the_nucleus(generator: BatchingGenerator) -> None:
    # A tiny nucleus keeps only the most probable token: sampling collapses to greedy.
    greedy = token_ids(await collect(generator, GenerationRequest(prompt=PROMPT, max_tokens=20)))
    narrow = token_ids(
        await collect(generator, GenerationRequest(prompt=PROMPT, max_tokens=20, temperature=1.0, top_p=1e-6, seed=5))
    )
    assert narrow == greedy
