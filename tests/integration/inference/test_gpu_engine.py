"""On a CUDA device: the engine serves from the CUDA provider with the KV cache in device memory
across steps, batches and turns, and chooses the tokens the CPU path chooses.

Tokens are compared with the CPU provider's: equal, except that where the two differ the CPU's
two best logits must be closer than ``TIE`` (relative to the logits' scale), a tie that float
summation order on another device may break the other way. Gemma 3 270M's fp16 CUDA variant is
compared with the int8 CPU artifact (two quantisations of the same GGUF): each prompt's first
token agrees wherever the CPU's margin between its two best tokens is above ``FP16_TOLERANCE``
of the logits' scale, and the logits differ by less than that tolerance at most.
Skipped, with the reason, without a CUDA device.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from nrt.adapters.inference import BatchingGenerator, CausalLM, Chunk, GenerationRequest, build_session, load_weights
from nrt.adapters.inference.kv_tensors import OrtValue
from nrt.adapters.inference.weights import CPU, CUDA
from nrt.adapters.settings import models_dir

pytestmark = pytest.mark.gpu  # skipped with its reason without CUDA (tests/conftest.py)

TIE = 1e-4
FP16_TOLERANCE = 0.05
PROMPTS = [f"{subject} is" for subject in ("Paris", "The sea", "A cat", "Music", "Ice", "The sun", "Bread", "Time")]


def ids(chunks: list[Chunk]) -> list[int]:
    return [t for c in chunks for t in c.token_ids]


async def run(gen: BatchingGenerator, request: GenerationRequest) -> list[Chunk]:
    return [chunk async for chunk in gen.generate(request)]


def cpu_model(path: Path) -> CausalLM:
    return CausalLM(build_session(load_weights(path), [CPU]), path)


def assert_cpu_would_choose(cpu: CausalLM, prompt: list[int], tokens: list[int]) -> None:
    """``tokens`` are the CPU's greedy continuation of ``prompt``, up to near-ties (``TIE``)."""
    ids_ = np.array([prompt], dtype=np.int64)
    logits, past = cpu.forward(ids_, np.ones_like(ids_), np.arange(len(prompt))[None, :], cpu.empty_past())
    for i, token in enumerate(tokens):
        row = logits[0].astype(np.float64)
        best = int(row.argmax())
        if token != best:
            margin = (row[best] - row[token]) / (1.0 + np.abs(row).max())
            assert margin < TIE, f"step {i}: CUDA chose {token}, CPU {best}, margin {margin:.2e} is not a tie"
            return  # past a tie the continuations may differ legitimately
        length = len(prompt) + i
        logits, past = cpu.forward(
            np.array([[token]]), np.ones((1, length + 1), dtype=np.int64), np.array([[length]]), past
        )


@pytest.fixture(scope="module")
def cuda_llama(tiny_llama_dir: Path) -> CausalLM:
    return CausalLM.load(tiny_llama_dir)


def test_the_cuda_provider_serves_and_the_cache_stays_in_device_memory(
    cuda_llama: CausalLM, tiny_llama_dir: Path
) -> None:
    assert cuda_llama.provider == CUDA
    assert cuda_llama.ops.device_type == "cuda"
    prompt = cuda_llama.encode(PROMPTS[0])
    stepper, ops = cuda_llama.stepper(), cuda_llama.ops
    ids_ = np.array([prompt], dtype=np.int64)
    logits, past = stepper.run(ids_, np.ones_like(ids_), np.arange(len(prompt))[None, :], ops.empty_past())
    tokens = [int(ops.greedy(logits)[0])]
    for step in range(16):
        assert all(isinstance(v, OrtValue) and v.device_name().lower() == "cuda" for v in past)
        length = len(prompt) + step
        logits, past = stepper.run(
            np.array([[tokens[-1]]]), np.ones((1, length + 1), dtype=np.int64), np.array([[length]]), past
        )
        assert logits.device_name().lower() == "cuda"
        tokens.append(int(ops.greedy(logits)[0]))
    assert_cpu_would_choose(cpu_model(tiny_llama_dir), prompt, tokens)


@pytest.mark.parametrize("concurrent", [1, 8, 32])
async def test_batching_on_cuda_equals_each_request_alone(cuda_llama: CausalLM, concurrent: int) -> None:
    gen = BatchingGenerator(cuda_llama, max_batch_size=32)
    try:
        prompts = [PROMPTS[i % len(PROMPTS)] + " " * (i // len(PROMPTS)) for i in range(concurrent)]
        requests = [GenerationRequest(prompt=p, max_tokens=8 + i % 7) for i, p in enumerate(prompts)]
        alone = [ids(await run(gen, r)) for r in requests]
        together = await asyncio.gather(*(run(gen, r) for r in requests))
        assert [ids(c) for c in together] == alone
        if concurrent > 1:
            assert max(c[-1].timings.batch_size_max for c in together if c[-1].timings) > 1
    finally:
        await gen.aclose()


async def test_a_session_cache_stays_on_the_device_between_turns(cuda_llama: CausalLM) -> None:
    gen = BatchingGenerator(cuda_llama, max_batch_size=8)
    try:
        first = await run(gen, GenerationRequest(prompt=PROMPTS[1], max_tokens=8, session_id="s"))
        held = gen.sessions.take("s")
        assert held is not None
        assert all(v.device_name().lower() == "cuda" for v in held.past)
        assert held.nbytes > 0
        gen.sessions.put("s", held)
        follow = PROMPTS[1] + "".join(c.text for c in first) + " and"
        cached = await run(gen, GenerationRequest(prompt=follow, max_tokens=8, session_id="s"))
        fresh = await run(gen, GenerationRequest(prompt=follow, max_tokens=8))
        assert ids(cached) == ids(fresh)
        usage = cached[-1].usage
        assert usage is not None
        assert usage.cached_tokens > 0
        assert gen.evict_session("s") > 0
    finally:
        await gen.aclose()


def test_gemma_fp16_on_cuda_agrees_with_the_int8_cpu_artifact() -> None:
    root = models_dir() / "gemma3-270m"
    variant = root / "cuda"
    if not (variant / "model.onnx").is_file() or not (root / "model.onnx").is_file():
        pytest.skip(
            f"gemma3-270m and its cuda variant are not prepared under {root} (nrt models prepare --provider all)"
        )
    cuda, cpu = CausalLM.load(variant), cpu_model(root)
    assert cuda.provider == CUDA
    for prompt_text in PROMPTS:
        prompt = cpu.encode(prompt_text)
        ids_ = np.array([prompt], dtype=np.int64)
        positions = np.arange(len(prompt))[None, :]
        expected, _ = cpu.forward(ids_, np.ones_like(ids_), positions, cpu.empty_past())
        output, past = cuda.stepper().run(ids_, np.ones_like(ids_), positions, cuda.ops.empty_past())
        assert all(v.device_name().lower() == "cuda" for v in past)
        got = cuda.ops.last_logits(output)[0].astype(np.float64)
        want = expected[0].astype(np.float64)
        scale = 1.0 + np.abs(want).max()
        assert np.abs(got - want).max() / scale < FP16_TOLERANCE
        top2 = np.sort(want)[-2:]
        if (top2[1] - top2[0]) / scale > FP16_TOLERANCE:
            assert int(got.argmax()) == int(want.argmax())
