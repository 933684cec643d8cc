"""The LM head rewrite (builders/integer_head.py) on a small graph built here: an 8-bit MatMulNBits head
whose bytes a GatherBlockQuantized embedding also reads, as a fused graph holds them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from nrt.adapters.catalogue.builders.integer_head import DETAIL, equaliser, matrix, rewrite

K, N, BLOCK = 64, 300, 32


def _blocks(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric 8-bit blocks of 32 (bytes q + 128) and their scales, as the builder writes them."""
    blocks = weights.reshape(N, K // BLOCK, BLOCK)
    scales = np.abs(blocks).max(axis=-1) / 127.0
    q = (np.round(blocks / scales[..., None]) + 128).astype(np.uint8)
    return q, scales.astype(np.float32)


def _graph(path: Path, weights: np.ndarray, *, bits: int = 8, extra_reader: bool = False) -> None:
    q, scales = _blocks(weights)
    nodes = [
        helper.make_node("Reshape", ["head.q", "table_shape"], ["table"]),
        helper.make_node(
            "GatherBlockQuantized",
            ["table", "input_ids", "head.scales", "zero_points"],
            ["embedded"],
            domain="com.microsoft",
            bits=8,
            block_size=BLOCK,
            gather_axis=0,
            quantize_axis=1,
        ),
        helper.make_node(
            "MatMulNBits",
            ["hidden", "head.q", "head.scales"],
            ["logits"],
            domain="com.microsoft",
            K=K,
            N=N,
            bits=bits,
            block_size=BLOCK,
            accuracy_level=4,
        ),
    ]
    outputs = [
        helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["b", "s", N]),
        helper.make_tensor_value_info("embedded", TensorProto.FLOAT, ["b", "s", K]),
    ]
    if extra_reader:
        nodes.append(helper.make_node("Cast", ["head.scales"], ["scales_copy"], to=TensorProto.FLOAT16))
        outputs.append(helper.make_tensor_value_info("scales_copy", TensorProto.FLOAT16, [N, K // BLOCK]))
    graph = helper.make_graph(
        nodes,
        "head",
        [
            helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["b", "s", K]),
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "s"]),
        ],
        outputs,
        [
            numpy_helper.from_array(q, "head.q"),
            numpy_helper.from_array(scales, "head.scales"),
            numpy_helper.from_array(np.array([N, K], np.int64), "table_shape"),
            numpy_helper.from_array(np.full(scales.shape, 128, np.uint8), "zero_points"),
        ],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    )
    onnx.save(model, str(path))


def _run(path: Path, hidden: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    logits, embedded = session.run(["logits", "embedded"], {"hidden": hidden, "input_ids": ids})
    return logits, embedded


@pytest.fixture
def weights() -> np.ndarray:
    rng = np.random.default_rng(7)
    w = rng.normal(0, 0.05, (N, K)).astype(np.float32)
    w[:, 5] *= 4.0  # an input channel large across the vocabulary, as Gemma's embedding has
    return w


def test_the_rewritten_head_computes_the_blocks_logits_and_embedding(tmp_path: Path, weights: np.ndarray) -> None:
    path = tmp_path / "model.onnx"
    _graph(path, weights)
    rng = np.random.default_rng(1)
    hidden = rng.normal(0, 1, (2, 3, K)).astype(np.float32)
    ids = np.array([[0, 17, 299], [5, 5, 123]], dtype=np.int64)
    logits, embedded = _run(path, hidden, ids)

    assert rewrite(path).detail == DETAIL
    ops = {node.op_type for node in onnx.load(str(path)).graph.node}
    assert "MatMulInteger" in ops
    assert not ops & {"MatMulNBits", "GatherBlockQuantized", "Reshape"}  # the old head, gather and table are gone
    new_logits, new_embedded = _run(path, hidden, ids)
    assert np.linalg.norm(new_logits - logits) <= 0.02 * np.linalg.norm(logits)
    assert np.linalg.norm(new_embedded - embedded) <= 0.02 * np.linalg.norm(embedded)
    blocks = (_blocks(weights)[0].astype(np.float32) - 128) * _blocks(weights)[1][..., None]
    assert np.linalg.norm(matrix(path) - blocks.reshape(N, K)) <= 0.02 * np.linalg.norm(blocks)
    np.testing.assert_allclose(new_embedded, matrix(path)[ids], rtol=1e-5, atol=1e-6)  # the rows it holds, once


def test_each_position_is_quantised_alone(tmp_path: Path, weights: np.ndarray) -> None:
    """A row's logits do not depend on the rows beside it (one activation scale per position)."""
    path = tmp_path / "model.onnx"
    _graph(path, weights)
    rewrite(path)
    rng = np.random.default_rng(2)
    quiet = rng.normal(0, 1, (1, 1, K)).astype(np.float32)
    loud = 50.0 * rng.normal(0, 1, (1, 1, K)).astype(np.float32)  # a batch mate with a far larger range
    ids = np.zeros((1, 1), dtype=np.int64)
    alone, _ = _run(path, quiet, ids)
    together, _ = _run(path, np.concatenate([quiet, loud]), np.zeros((2, 1), dtype=np.int64))
    np.testing.assert_array_equal(together[0], alone[0])


def test_the_head_computes_the_float_product_of_the_rows_it_holds(tmp_path: Path, weights: np.ndarray) -> None:
    """Each position's activations go in as two 7-bit rows (the rounding's residual the second): the logits are
    the float product of the hidden state and the int8 rows held, to about 14 bits of the activations. One 7-bit
    row is ten times further from it (as this head was before: on Gemma 3 270M it cost 3.5% of perplexity)."""
    path = tmp_path / "model.onnx"
    _graph(path, weights)
    rewrite(path)
    rng = np.random.default_rng(3)
    hidden = rng.normal(0, 1, (2, 4, K)).astype(np.float32)
    hidden[..., 9] *= 30.0  # a channel far larger than the rest sets each position's step, as in Gemma
    logits, _ = _run(path, hidden, np.zeros((2, 4), dtype=np.int64))
    exact = hidden.astype(np.float64) @ matrix(path).T.astype(np.float64)

    def error(result: np.ndarray) -> float:
        return float(np.linalg.norm(result - exact) / np.linalg.norm(exact))

    assert error(logits) < 2e-3
    equalise = 1.0 / equaliser(weights)  # the graph's h = hidden / d; one 7-bit row of it, as before:
    h = hidden * equalise
    step = np.abs(h).max(axis=-1, keepdims=True) / 63.0
    one_row = (np.round(h / step) * step / equalise) @ matrix(path).T
    assert error(one_row) > 10 * error(logits)


def test_without_the_channel_equaliser_a_large_channel_would_set_every_rows_step(weights: np.ndarray) -> None:
    """Why ``d`` is there: int8 rows of ``W`` itself lose far more than int8 rows of ``W d``."""

    def row_error(w: np.ndarray) -> float:
        step = np.abs(w).max(axis=1, keepdims=True) / 127.0
        return float(np.linalg.norm(np.round(w / step) * step - w) / np.linalg.norm(w))

    loud = weights.copy()
    loud[:, 5] *= 10.0
    equalised = loud * equaliser(loud)[None, :]
    assert row_error(equalised) < 0.5 * row_error(loud)


def test_products_at_the_ends_of_the_range_do_not_saturate(tmp_path: Path) -> None:
    """Every activation and weight at its largest: 8-bit activations would overflow the 16-bit pair sums of
    AVX2's u8 x s8 kernel (``vpmaddubsw``: 2 * 255 * 127 > 32767); the head's 7-bit ones (at most 127) do not."""
    path = tmp_path / "model.onnx"
    weights = np.full((N, K), 0.05, np.float32)
    weights[1::2] *= -1.0  # rows of either sign
    _graph(path, weights)
    rewrite(path)
    hidden = np.full((1, 1, K), 3.0, np.float32)
    logits, _ = _run(path, hidden, np.zeros((1, 1), dtype=np.int64))
    np.testing.assert_allclose(logits[0, 0], hidden[0, 0] @ weights.T, rtol=1e-2)


@pytest.mark.parametrize(
    ("bits", "extra_reader", "why"),
    [
        (4, False, "the LM head is 4-bit"),
        (8, True, "the LM head's weights are read by Cast, GatherBlockQuantized, Reshape"),
    ],
)
def test_a_head_the_pass_does_not_know_is_left_as_built(
    tmp_path: Path, weights: np.ndarray, bits: int, extra_reader: bool, why: str
) -> None:
    path = tmp_path / "model.onnx"
    _graph(path, weights, bits=bits, extra_reader=extra_reader)
    before = path.read_bytes()
    result = rewrite(path)
    assert result.detail is None
    assert result.skipped == why
    assert path.read_bytes() == before
