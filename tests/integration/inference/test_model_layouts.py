"""Graph layouts the catalogue produces: Gemma 3 with and without position_ids, BOS handling."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

from tokenizers import Tokenizer

from nrt.adapters.inference import BatchingGenerator, CausalLM, Chunk, GenerationRequest, bare_greedy

PROMPTS = ["The quick brown fox", "Hi", "System: be brief.\nUser: what is the capital of France?\nAssistant:"]


async def run(gen: BatchingGenerator, request: GenerationRequest) -> list[int]:
    chunks: list[Chunk] = [c async for c in gen.generate(request)]
    return [t for c in chunks for t in c.token_ids]


async def alone_and_together(model: CausalLM) -> tuple[list[list[int]], list[list[int]], int]:
    gen = BatchingGenerator(model, max_batch_size=8)
    try:
        # Long enough to cross Gemma's sliding window (16 here) while batched.
        requests = [GenerationRequest(prompt=p, max_tokens=40 - 5 * i) for i, p in enumerate(PROMPTS)]
        alone = [await run(gen, r) for r in requests]
        steps = gen.stats().steps
        together = list(await asyncio.gather(*(run(gen, r) for r in requests)))
        return alone, together, gen.stats().steps - steps
    finally:
        gen.close()


async def test_gemma3_with_position_ids_batches_exactly(tiny_gemma3_dir: Path) -> None:
    model = CausalLM.load(tiny_gemma3_dir, ["CPUExecutionProvider"])
    assert model.signature.has_position_ids
    assert model.spec.num_kv_heads == 1
    assert model.spec.num_layers == 4
    assert model.can_batch
    assert model.batch_exact  # float32: a padded row differs from the row alone in the last bits at most
    alone, together, steps = await alone_and_together(model)
    assert together == alone
    assert alone[0] == bare_greedy(model.session, model.encode(PROMPTS[0]), len(alone[0]))
    assert steps < sum(len(a) - 1 for a in alone)  # decode steps were shared


async def test_gemma3_without_position_ids_is_served_one_row_at_a_time(tiny_gemma3_no_positions_dir: Path) -> None:
    model = CausalLM.load(tiny_gemma3_no_positions_dir, ["CPUExecutionProvider"])
    assert not model.signature.has_position_ids
    # The graph derives positions from the cache length: left padding shifts them.
    assert model.padding_hidden()  # the mask works ...
    assert min(model.padding_errors.values()) > 1e-3  # ... but every padding shifts the positions
    assert not model.can_batch
    assert BatchingGenerator(model, max_batch_size=8).max_batch_size == 1
    alone, together, _ = await alone_and_together(model)
    assert together == alone  # still correct (and concurrent requests still all complete)


def test_bos_is_prepended_when_the_record_says_the_tokenizer_does_not(tiny_llama_dir: Path, tmp_path: Path) -> None:
    for name in ("model.onnx", "config.json"):
        shutil.copy(tiny_llama_dir / name, tmp_path / name)
    tokenizer = Tokenizer.from_file(str(tiny_llama_dir / "tokenizer.json"))
    tokenizer.post_processor = None  # type: ignore[assignment]
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    record = json.loads((tiny_llama_dir / "nrt-artifact.json").read_text())
    record["tokenizer_adds_special_tokens"] = False
    (tmp_path / "nrt-artifact.json").write_text(json.dumps(record))
    model = CausalLM.load(tmp_path)
    assert model.encode("Hello")[0] == 1
    assert model.encode("Hello", add_special_tokens=False)[0] != 1
    assert model.encode("Hello") == CausalLM.load(tiny_llama_dir).encode("Hello")
