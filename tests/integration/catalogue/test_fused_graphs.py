"""Fused decoder graphs (onnxruntime-genai's model builder): an operator's checkpoint prepared as one,
driven by the engine (right-padded batches), its greedy tokens those of the optimum export, and the
optimum export as the fallback for an architecture the builder lacks. The builder comes with the
``export`` extra (scripts/bootstrap); skipped, with the reason, where it is not installed."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from nrt.adapters.catalogue import load_record, prepare
from nrt.adapters.catalogue.builders import fused
from nrt.adapters.catalogue.builders.integer_head import DETAIL as INTEGER_HEAD
from nrt.adapters.catalogue.checkpoints import CpuFormat, checkpoint_entry, cpu_format, graph_path, local_checkpoint
from nrt.adapters.inference import BatchingGenerator, CausalLM, GenerationRequest, bare_greedy
from nrt.core.vocabulary import WeightFormat
from nrt.testing.hf_checkpoints import save_checkpoint

needs_builder = pytest.mark.skipif(fused.builder_missing() is not None, reason=str(fused.builder_missing()))

PROMPTS = ["The quick brown fox", "Hello", "Q: 2+2?\nA:", "System: be brief.\nUser: what is the capital of France?"]


def prepared(checkpoint: Path, fmt: CpuFormat) -> Path:
    entry = checkpoint_entry(local_checkpoint(checkpoint, fmt))
    return prepare(entry.name, entry=entry, providers=("cpu",)).directory


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[CpuFormat, Path]]:
    """A tiny random Llama checkpoint prepared as the optimum fp32 export and as fused fp32 and int4 graphs."""
    root = tmp_path_factory.mktemp("fused")
    patch = pytest.MonkeyPatch()
    patch.setenv("NRT_HOME", str(root / "nrt-home"))
    checkpoint = save_checkpoint(root / "llama", "llama", seed=7, config={"max_position_embeddings": 256})
    try:
        yield {fmt: prepared(checkpoint, fmt) for fmt in ("none", "fused-fp32", "fused-int4")}
    finally:
        patch.undo()


@needs_builder
def test_the_record_says_which_path_built_the_graph(llama: dict[CpuFormat, Path]) -> None:
    optimum, fp32, int4 = (load_record(llama[fmt]) for fmt in ("none", "fused-fp32", "fused-int4"))
    assert graph_path(optimum) == "optimum"
    assert graph_path(fp32) == graph_path(int4) == "fused"
    assert "GroupQueryAttention" in (int4.quantization_detail or "")
    assert int4.quantization == "int4"
    assert int4.position_ids_input is None  # positions come from the mask
    # the int4 graph's LM head (8-bit blocks) is rewritten as an integer product; fp32's stays a float MatMul
    assert (int4.quantization_detail or "").endswith(INTEGER_HEAD), int4.quantization_detail
    assert "the LM head as built (no MatMulNBits writes the logits)" in (fp32.quantization_detail or "")


@needs_builder
def test_fused_fp32_decodes_the_optimum_exports_greedy_tokens(llama: dict[CpuFormat, Path]) -> None:
    optimum, fp32 = CausalLM.load(llama["none"]), CausalLM.load(llama["fused-fp32"])
    for prompt in PROMPTS:
        ids = optimum.encode(prompt)
        assert bare_greedy(fp32.session, ids, 24) == bare_greedy(optimum.session, ids, 24)


@needs_builder
async def test_the_engine_batches_a_fused_graph_right_padded(llama: dict[CpuFormat, Path]) -> None:
    model = CausalLM.load(llama["fused-int4"])
    assert model.right_padded
    assert model.can_batch
    generator = BatchingGenerator(model, max_batch_size=8)

    async def run(request: GenerationRequest) -> list[int]:
        return [t async for chunk in generator.generate(request) for t in chunk.token_ids]

    try:
        requests = [GenerationRequest(prompt=p, max_tokens=8 + 5 * i) for i, p in enumerate(PROMPTS)]
        alone = [await run(r) for r in requests]
        for request, tokens in zip(requests, alone, strict=True):
            assert tokens == bare_greedy(model.session, model.encode(request.prompt), len(tokens))
        steps = generator.stats().steps
        together = await asyncio.gather(*(run(r) for r in requests))
        assert together == alone
        assert generator.stats().steps - steps < sum(len(a) for a in alone)  # rows shared steps

        async def later(delay: float, request: GenerationRequest) -> list[int]:
            await asyncio.sleep(delay)
            return await run(request)

        staggered = await asyncio.gather(*(later(0.003 * i, r) for i, r in enumerate(requests)))
        assert staggered == alone  # rows join a batch already decoding and leave at their own lengths
    finally:
        generator.close()


@needs_builder
def test_an_architecture_the_builder_lacks_falls_back_to_optimum(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NRT_HOME", str(tmp_path / "nrt-home"))
    monkeypatch.setattr(fused, "ARCHITECTURES", ())
    checkpoint = save_checkpoint(tmp_path / "llama", "llama", seed=7, config={"max_position_embeddings": 256})
    record = load_record(prepared(checkpoint, "fused-int4"))
    assert graph_path(record) == "optimum"
    assert (record.quantization_detail or "").startswith("optimum export, not fused (the model builder has no")
    assert record.position_ids_input is not None


def test_fused_graphs_are_the_default_and_nrt_fused_graphs_0_opts_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NRT_FUSED_GRAPHS", raising=False)
    assert cpu_format(WeightFormat.INT4) == "fused-int4"
    assert cpu_format(None) == "fused-int8"
    assert cpu_format(WeightFormat.NONE) == "fused-fp32"
    monkeypatch.setenv("NRT_FUSED_GRAPHS", "0")
    assert cpu_format(WeightFormat.INT4) == "int4"
    assert cpu_format(None) == "int8"
    assert cpu_format(WeightFormat.INT4, fused=True) == "fused-int4"


@needs_builder
async def test_a_session_reuses_a_fused_graphs_cache_and_eviction_frees_it(llama: dict[CpuFormat, Path]) -> None:
    model = CausalLM.load(llama["fused-int4"])
    generator = BatchingGenerator(model, max_batch_size=4)

    async def run(request: GenerationRequest) -> tuple[list[int], int]:
        chunks = [chunk async for chunk in generator.generate(request)]
        usage = chunks[-1].usage
        assert usage is not None
        return [t for chunk in chunks for t in chunk.token_ids], usage.cached_tokens

    try:
        first = "User: what is the capital of France?\nAssistant:"
        await run(GenerationRequest(prompt=first, max_tokens=6, session_id="s"))
        # a fixed reply (a random model's own would re-tokenize otherwise, and the fresh prompt differ)
        second = first + " Paris.\nUser: and of Italy?\nAssistant:"
        cached, reused = await run(GenerationRequest(prompt=second, max_tokens=8, session_id="s"))
        fresh, none = await run(GenerationRequest(prompt=second, max_tokens=8))
        assert cached == fresh
        assert reused > 0
        assert none == 0
        held = generator.session_bytes("s")
        assert held > 0
        assert generator.evict_session("s") == held
        _, after = await run(GenerationRequest(prompt=second, max_tokens=2, session_id="s"))
        assert after == 0
    finally:
        generator.close()


@needs_builder
def test_a_fused_router_scores_its_labels_one_row_at_a_time_as_the_optimum_export_does(
    llama: dict[CpuFormat, Path],
) -> None:
    """ONNX Runtime's CPU GroupQueryAttention adds several tokens to one row's cache at a time: a fused
    router scores its options one run each, and scores them as the optimum export does."""
    from nrt.hosting.classify import classify_causal

    optimum, fp32 = CausalLM.load(llama["none"]), CausalLM.load(llama["fused-fp32"])
    assert optimum.extends_rows_together
    assert not fp32.extends_rows_together
    labels = ("billing", "technical support")
    for text in ("I was charged twice this month", "The app crashes when I upload a file"):
        ours, theirs = classify_causal(fp32, labels, text), classify_causal(optimum, labels, text)
        assert ours.best == theirs.best
        assert all(abs(ours.scores[label] - theirs.scores[label]) < 1e-3 for label in labels)
