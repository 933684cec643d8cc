"""``logits_to_keep``: the rewritten graph projects only the last positions, and computes the same logits."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from nrt.adapters.catalogue.builders.logits import add_logits_to_keep
from nrt.adapters.catalogue.builders.quantize import quantize_blockwise
from nrt.adapters.inference import (
    BatchingGenerator,
    CausalLM,
    GenerationRequest,
    bare_greedy,
    build_session,
    load_weights,
)
from nrt.adapters.inference.artifact import MODEL_FILE
from nrt.adapters.inference.errors import ArtifactError
from nrt.testing.tiny_models import build_tiny_llama

PROMPT = "The history of the city of Paris begins"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("logits") / "tiny-llama")


def rewritten(source: Path, target: Path, *, int8: bool = False) -> Path:
    shutil.copytree(source, target)
    if int8:
        quantize_blockwise(source / MODEL_FILE, target / MODEL_FILE, min_elements=64)
    add_logits_to_keep(target / MODEL_FILE)
    return target


def load(path: Path) -> CausalLM:
    return CausalLM(build_session(load_weights(path), ["CPUExecutionProvider"]), path)


@pytest.mark.parametrize("int8", [False, True], ids=["fp32", "int8"])
async def test_the_rewritten_graph_computes_the_same_logits(tiny: Path, tmp_path: Path, int8: bool) -> None:
    reference_dir = tiny
    if int8:
        reference_dir = tmp_path / "int8"
        shutil.copytree(tiny, reference_dir)
        quantize_blockwise(tiny / MODEL_FILE, reference_dir / MODEL_FILE, min_elements=64)
    before, after = load(reference_dir), load(rewritten(tiny, tmp_path / "kept", int8=int8))
    assert not before.signature.has_logits_to_keep
    assert after.signature.has_logits_to_keep
    ids = np.array([before.encode(PROMPT)], dtype=np.int64)
    n = ids.shape[1]
    args = (ids, np.ones_like(ids), np.arange(n)[None, :])
    every, _ = before.forward_sequence(*args, before.empty_past())
    every_after, _ = after.forward_sequence(*args, after.empty_past())  # logits_to_keep 0: all positions
    np.testing.assert_allclose(every_after, every, rtol=1e-5, atol=1e-5)
    last, _ = after.forward(*args, after.empty_past())  # logits_to_keep 1
    np.testing.assert_allclose(last, every[:, -1, :], rtol=1e-5, atol=1e-5)
    logits, _ = after.stepper().run(*args, after.ops.empty_past())
    assert logits.shape() == [1, 1, before.spec.vocab_size]  # the serving path projects one row
    # the floor and the batching engine agree on the rewritten graph
    expected = bare_greedy(before.session, before.encode(PROMPT), 12)
    assert bare_greedy(after.session, after.encode(PROMPT), 12) == expected
    gen = BatchingGenerator(after, max_batch_size=4)
    try:
        chunks = [c async for c in gen.generate(GenerationRequest(prompt=PROMPT, max_tokens=12))]
    finally:
        await gen.aclose()
    assert [t for c in chunks for t in c.token_ids] == expected


def test_rewriting_twice_changes_nothing(tiny: Path, tmp_path: Path) -> None:
    path = rewritten(tiny, tmp_path / "kept") / MODEL_FILE
    once = path.read_bytes()
    add_logits_to_keep(path)
    assert path.read_bytes() == once


def test_a_graph_without_an_lm_head_is_refused(tmp_path: Path) -> None:
    onnx = pytest.importorskip("onnx", reason="the rewrite itself needs the onnx package (the export extra)")
    helper = onnx.helper
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["logits"])],
        "no-head",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 2])],
        [helper.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, [1, 2])],
    )
    path = tmp_path / MODEL_FILE
    onnx.save(helper.make_model(graph), str(path))
    with pytest.raises(ArtifactError, match="no MatMul produces the graph's logits"):
        add_logits_to_keep(path)
