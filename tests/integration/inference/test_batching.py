"""Concurrent requests share decode steps, and never see each other's KV state."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence

import pytest

from nrt.adapters.inference import (
    BatchingGenerator,
    CausalLM,
    Chunk,
    GenerationRequest,
    GeneratorClosedError,
    bare_greedy,
)
from nrt.adapters.inference.causal import IntArray, Stepper
from nrt.adapters.inference.kv_tensors import KV, OrtValue

PROMPTS = [
    "The quick brown fox",
    "Hello",
    "日本語のテキストです。絵文字も 🎉",
    "System: you are a helpful assistant.\nUser: what is the capital of France?\nAssistant:",
    "Q: 2+2?\nA:",
    "Bonjour le monde, ça va?",
]


async def run(gen: BatchingGenerator, request: GenerationRequest, delay: float = 0.0) -> list[Chunk]:
    if delay:
        await asyncio.sleep(delay)
    return [chunk async for chunk in gen.generate(request)]


def ids(chunks: list[Chunk]) -> list[int]:
    return [t for c in chunks for t in c.token_ids]


async def test_greedy_alone_equals_batched_with_other_lengths(
    generator: BatchingGenerator, tiny_llama: CausalLM
) -> None:
    requests = [GenerationRequest(prompt=p, max_tokens=12 + 5 * i) for i, p in enumerate(PROMPTS)]
    alone = [ids(await run(generator, r)) for r in requests]
    for r, tokens in zip(requests, alone, strict=True):
        assert tokens == bare_greedy(tiny_llama.session, tiny_llama.encode(r.prompt), len(tokens))
    steps_before = generator.stats().steps
    together = await asyncio.gather(*(run(generator, r) for r in requests))
    assert [ids(c) for c in together] == alone
    # It really batched: rows shared steps (fewer steps than the sum), batches above 1.
    steps = generator.stats().steps - steps_before
    assert steps < sum(len(a) for a in alone) - len(alone)
    assert max(c[-1].timings.batch_size_max for c in together if c[-1].timings) > 1


async def test_rows_join_and_leave_between_steps(generator: BatchingGenerator) -> None:
    requests = [GenerationRequest(prompt=p, max_tokens=30 - 3 * i) for i, p in enumerate(PROMPTS)]
    alone = [ids(await run(generator, r)) for r in requests]
    # Staggered arrivals: each request joins a batch already decoding others, and leaves at
    # its own length while the rest continue.
    staggered = await asyncio.gather(*(run(generator, r, delay=0.004 * i) for i, r in enumerate(requests)))
    assert [ids(c) for c in staggered] == alone
    assert generator.stats().active == 0


async def test_more_requests_than_batch_rows_queue_and_match(tiny_llama: CausalLM) -> None:
    gen = BatchingGenerator(tiny_llama, max_batch_size=2)
    try:
        requests = [GenerationRequest(prompt=p, max_tokens=10) for p in PROMPTS]
        alone = [ids(await run(gen, r)) for r in requests]
        together = await asyncio.gather(*(run(gen, r) for r in requests))
        assert [ids(c) for c in together] == alone
        assert all(c[-1].timings is not None and c[-1].timings.batch_size_max <= 2 for c in together)
    finally:
        gen.close()


async def test_seeded_sampling_alone_equals_batched(generator: BatchingGenerator) -> None:
    requests = [
        GenerationRequest(prompt=p, max_tokens=15, temperature=0.8, top_p=0.95, seed=i) for i, p in enumerate(PROMPTS)
    ]
    alone = [ids(await run(generator, r)) for r in requests]
    together = await asyncio.gather(*(run(generator, r) for r in requests))
    assert [ids(c) for c in together] == alone


async def test_same_prompt_after_another_request_is_unaffected(generator: BatchingGenerator) -> None:
    request = GenerationRequest(prompt=PROMPTS[0], max_tokens=20)
    first = ids(await run(generator, request))
    await run(generator, GenerationRequest(prompt=PROMPTS[3], max_tokens=20))
    assert ids(await run(generator, request)) == first


async def test_a_consumer_that_leaves_early_frees_its_row(generator: BatchingGenerator) -> None:
    long = GenerationRequest(prompt=PROMPTS[0], max_tokens=200)
    other = GenerationRequest(prompt=PROMPTS[1], max_tokens=40)
    expected_other = ids(await run(generator, other))

    async def leave_after(n: int) -> int:
        seen = 0
        stream = generator.generate(long)
        async for _ in stream:
            seen += 1
            if seen == n:
                break
        await stream.aclose()
        return seen

    seen, other_chunks = await asyncio.gather(leave_after(3), run(generator, other))
    assert seen == 3
    assert ids(other_chunks) == expected_other
    for _ in range(100):
        if generator.stats().active == 0:
            break
        await asyncio.sleep(0.01)
    assert generator.stats().active == 0


async def test_event_loop_stays_responsive_while_decoding(generator: BatchingGenerator) -> None:
    ticks = 0
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await asyncio.sleep(0.001)

    task = asyncio.create_task(ticker())
    await asyncio.gather(*(run(generator, GenerationRequest(prompt=p, max_tokens=60)) for p in PROMPTS))
    done.set()
    await task
    assert ticks > 5


async def test_chunked_prefill_interleaves_with_decoding_and_matches(tiny_llama: CausalLM) -> None:
    # 5-token prefill chunks: a long prompt takes many iterations, each also decoding the others.
    gen = BatchingGenerator(tiny_llama, max_batch_size=8, prefill_chunk_tokens=5)
    try:
        long_prompt = PROMPTS[3] * 2
        requests = [GenerationRequest(prompt=p, max_tokens=25) for p in [*PROMPTS[:3], long_prompt]]
        for r in requests:
            tokens = ids(await run(gen, r))
            assert tokens == bare_greedy(tiny_llama.session, tiny_llama.encode(r.prompt), len(tokens))
        alone = [ids(await run(gen, r)) for r in requests]
        # The long prompt arrives while the short ones decode.
        together = await asyncio.gather(*(run(gen, r, delay=0.005 * (i == 3)) for i, r in enumerate(requests)))
        assert [ids(c) for c in together] == alone
        timings = together[3][-1].timings
        assert timings is not None
        assert timings.prefilled_tokens == len(tiny_llama.encode(long_prompt))
    finally:
        gen.close()


async def test_closing_fails_running_and_queued_requests_cleanly(tiny_llama: CausalLM) -> None:
    gen = BatchingGenerator(tiny_llama, max_batch_size=1)
    started = asyncio.Event()

    async def consume(request: GenerationRequest) -> BaseException | None:
        try:
            async for _ in gen.generate(request):
                started.set()
                await asyncio.sleep(0.002)
        except GeneratorClosedError as exc:
            return exc
        return None

    tasks = [asyncio.create_task(consume(GenerationRequest(prompt=p, max_tokens=200))) for p in PROMPTS[:3]]
    await started.wait()
    await gen.aclose()
    results = await asyncio.gather(*tasks)
    assert all(isinstance(r, GeneratorClosedError) for r in results)
    with pytest.raises(GeneratorClosedError):
        await run(gen, GenerationRequest(prompt="x", max_tokens=1))


class _SlowPrefills:
    """A stepper whose prompt runs take ``PREFILL_S`` longer, noting when each one starts."""

    PREFILL_S = 0.05

    def __init__(self, stepper: Stepper) -> None:
        self.stepper = stepper
        self.prefill_starts: list[float] = []
        self.prefilling = threading.Event()  # set when the first prompt run starts

    def run(self, ids: IntArray, mask: IntArray, positions: IntArray, past: Sequence[OrtValue]) -> tuple[OrtValue, KV]:
        if ids.shape[1] > 1:
            self.prefill_starts.append(time.perf_counter())
            self.prefilling.set()
            time.sleep(self.PREFILL_S)
        return self.stepper.run(ids, mask, positions, past)


async def test_prompts_admitted_together_stream_their_first_tokens_one_by_one(
    tiny_llama: CausalLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A prompt's first token goes out when its prefill ends, not when the last prompt admitted with it ends."""
    real = tiny_llama.stepper
    slow = _SlowPrefills(real())
    monkeypatch.setattr(tiny_llama, "stepper", lambda: slow)
    gen = BatchingGenerator(tiny_llama, max_batch_size=8)
    try:
        first_at: dict[int, float] = {}

        async def first_token(i: int, prompt: str) -> list[int]:
            tokens: list[int] = []
            async for chunk in gen.generate(GenerationRequest(prompt=prompt, max_tokens=4)):
                first_at.setdefault(i, time.perf_counter())
                tokens.extend(chunk.token_ids)
            return tokens

        # the first prompt keeps the scheduler busy while the next three queue: they are admitted together
        busy = asyncio.create_task(first_token(0, PROMPTS[0]))
        assert await asyncio.to_thread(slow.prefilling.wait, 10.0)
        together = await asyncio.gather(*(first_token(i, p) for i, p in enumerate(PROMPTS[1:4], start=1)))
        await busy
        assert len(slow.prefill_starts) == 4
        # the second admitted prompt's first token came while the third admitted prompt's prefill was still to start
        assert first_at[1] < slow.prefill_starts[3]
        assert first_at[2] < slow.prefill_starts[3] + _SlowPrefills.PREFILL_S
        for prompt, tokens in zip(PROMPTS[1:4], together, strict=True):
            assert tokens == bare_greedy(tiny_llama.session, tiny_llama.encode(prompt), len(tokens))
    finally:
        gen.close()
