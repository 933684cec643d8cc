"""A fused graph's LM head as an integer matrix product, each position quantised by itself.

The LM head is the largest matrix of a small model (Gemma 3 270M: 262,144 x 640, half the bytes a
decode step reads) and the builder writes it as an 8-bit ``MatMulNBits``. MLAS's integer GEMM
(``MatMulInteger``, u8 x s8, its weights prepacked at load) computes it faster on a CPU without VNNI
(AVX2), and the more so the more rows a batch has: measured here on 2 cores, 640 -> 262,144, the best
of 12 interleaved runs, one row 17.5 ms against 21.4, eight rows 47.6 against 78.3 (a u8 x u8 product
is exact too but packs its weights as 16-bit: one row 26.9 ms). This pass rewrites the head so:

    logits = (MatMulInteger(q(h / d), W') + MatMulInteger(r(h / d), W') / 126) * s(h / d) * t

- ``d`` (per input channel ``k``): ``1 / max_n |W[n, k]|``, normalised to a geometric mean of 1. A
  channel whose weights are large across the vocabulary no longer sets every row's step: without it
  Gemma's perplexity rises 1.058x. It needs no data (nothing calibrated);
- ``W' = round(W * d / t)``, ``t[n] = max_k |W[n, k] d[k]| / 127``: int8 per vocabulary row, stored
  ``[K, N]`` as ``MatMulInteger`` reads it;
- ``q``, ``s``: the hidden state of each position quantised to 7 bits about 64 with its own scale
  ``max |h / d| / 63``, so each row of a batch computes what it computes alone, and no pair of
  products overflows the 16-bit sums of AVX2's u8 x s8 kernel (8-bit activations do);
- ``r``: what that rounding left, times 126, rounded to 7 bits the same way: each position's
  activations go in as two rows of one product (``[2, ..., K]``), about 14 bits together. One 7-bit
  row was too coarse for Gemma's hidden states (a few channels set the step): on 1,000 tokens of
  prose its perplexity was 1.035x the float product of the same int8 rows, and its top token
  differed on 14% of positions; with the residual row the perplexity is the float product's. The
  second row costs no extra weight bytes: at one position the product is bound by reading ``W'``.

The tied
embedding (``GatherBlockQuantized`` over the head's bytes through a ``Reshape``) gathers its rows
from ``W'`` instead (``Gather`` on axis 1, then ``t`` and ``1 / d``): the weights are held once. A head
the pass does not recognise (not an 8-bit ``MatMulNBits``, or its bytes read by anything else) is
left as it is and :func:`rewrite` says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from nrt.adapters.catalogue.builders.gguf_weights import eight_bit_blocks

PREFIX = "/nrt/lm_head_int8"
DETAIL = (
    "the LM head as MatMulInteger over int8 rows of the channel-equalised matrix, each position's activations"
    " quantised alone as two 7-bit rows (the rounding's residual the second)"
)
WEIGHT_MAX = 127  # int8 weights
# 7-bit activations, stored u8 in [1, 127] about 64: a u8 x s8 pair then sums to at most 2 * 127 * 127 = 32,258,
# within the int16 that AVX2's vpmaddubsw adds pairs into (8-bit activations, up to 255, saturate it)
ACTIVATION_MAX, ACTIVATION_ZERO = 63, 64
# the second row: the first rounding's residual (within +-0.5 of a step) times this, rounded: again within +-63
RESIDUAL = 2 * ACTIVATION_MAX
# d[k] = max_n |W[n, k]| ** -EQUALISE_POWER. Gemma 3 270M's perplexity over the GGUF blocks' (bench.models'
# document, 8-bit activations): 1.058x without (0), 1.009x at 0.5, 1.017x at 0.75, 0.998x at 1
EQUALISE_POWER = 1.0

Floats = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Rewritten:
    """What :func:`rewrite` did: ``detail`` for the record, or ``skipped`` (why the head stayed as built)."""

    detail: str | None
    skipped: str | None = None


def rewrite(path: Path) -> Rewritten:
    """Rewrite the LM head of the fused graph in ``path`` (``model.onnx``, one file) in place."""
    from nrt.adapters.catalogue.builders.export import save_model, untyped

    onnx = untyped("onnx")
    numpy_helper = untyped("onnx.numpy_helper")
    helper = untyped("onnx.helper")
    model = onnx.load(str(path))
    graph = model.graph
    initializers = {init.name: init for init in graph.initializer}
    head = next((n for n in graph.node if n.op_type == "MatMulNBits" and n.output[0] == "logits"), None)
    if head is None:
        return Rewritten(None, "no MatMulNBits writes the logits")
    attributes = {a.name: a.i for a in head.attribute}
    if attributes.get("bits") != 8:
        return Rewritten(None, f"the LM head is {attributes.get('bits')}-bit")
    if not all(name in initializers for name in head.input[1:3]):
        return Rewritten(None, "the LM head's weights are not constants of the graph")
    embedding = _tied_embedding(graph, head)
    if isinstance(embedding, str):
        return Rewritten(None, embedding)
    weights = eight_bit_blocks(head, initializers, numpy_helper)
    weights = weights.reshape(weights.shape[0], -1)[:, : attributes["K"]]
    quantised, rows, equalise = quantise(weights)
    p = PREFIX
    graph.initializer.extend(
        [
            numpy_helper.from_array(np.ascontiguousarray(quantised.T), f"{p}/weight"),
            numpy_helper.from_array(rows, f"{p}/row_scales"),
            numpy_helper.from_array((1.0 / equalise).astype(np.float32), f"{p}/equalise"),
            numpy_helper.from_array(np.array(ACTIVATION_ZERO, np.uint8), f"{p}/zero"),
            numpy_helper.from_array(np.array([-1], np.int64), f"{p}/last_axis"),
            numpy_helper.from_array(np.array(1.0 / ACTIVATION_MAX, np.float32), f"{p}/step"),
            numpy_helper.from_array(np.array(np.finfo(np.float32).tiny, np.float32), f"{p}/tiny"),
            numpy_helper.from_array(np.array(ACTIVATION_ZERO, np.float32), f"{p}/offset"),
            numpy_helper.from_array(np.array(RESIDUAL, np.float32), f"{p}/residual"),
            numpy_helper.from_array(np.array(1.0 / RESIDUAL, np.float32), f"{p}/residual_step"),
            numpy_helper.from_array(np.array([0], np.int64), f"{p}/first_axis"),
        ]
    )
    _replace_node(graph, head, _head_nodes(helper.make_node, onnx.TensorProto, _opset(model), head))
    if embedding is not None:
        _replace_node(graph, embedding, _embedding_nodes(helper.make_node, onnx.TensorProto, embedding))
    _prune(graph)
    save_model(model, path)
    return Rewritten(DETAIL)


def quantise(weights: Floats) -> tuple[npt.NDArray[np.int8], Floats, Floats]:
    """``W`` ``[N, K]`` as int8 rows of ``W d`` (``[N, K]``), their scales ``t`` ``[N]`` and ``d`` ``[K]``."""
    equalise = equaliser(weights)
    scaled = weights * equalise[None, :]
    rows = (np.abs(scaled).max(axis=1) / WEIGHT_MAX).astype(np.float32)
    rows[rows == 0] = 1.0
    quantised = np.clip(np.round(scaled / rows[:, None]), -WEIGHT_MAX, WEIGHT_MAX).astype(np.int8)
    return quantised, rows, equalise


def _head_nodes(node: Any, types: Any, opset: int, head: Any) -> list[Any]:
    """``logits = (MatMulInteger(q, W') + MatMulInteger(r, W') / 126) * s * t``: ``q`` and its residual ``r``
    (each position's own) stacked on a new first axis and multiplied by ``W'`` in one product."""
    p = PREFIX
    return [
        node("Mul", [head.input[0], f"{p}/equalise"], [f"{p}/h"], name=f"{p}/Equalise"),
        node("Abs", [f"{p}/h"], [f"{p}/abs"], name=f"{p}/Abs"),
        _reduce_max(node, opset, f"{p}/abs", f"{p}/last_axis", f"{p}/max"),
        node("Mul", [f"{p}/max", f"{p}/step"], [f"{p}/s0"], name=f"{p}/Step"),
        node("Max", [f"{p}/s0", f"{p}/tiny"], [f"{p}/s"], name=f"{p}/NotZero"),
        node("Div", [f"{p}/h", f"{p}/s"], [f"{p}/hs"], name=f"{p}/Scale"),
        node("Round", [f"{p}/hs"], [f"{p}/hr"], name=f"{p}/Round"),
        node("Sub", [f"{p}/hs", f"{p}/hr"], [f"{p}/rest"], name=f"{p}/Residual"),
        node("Mul", [f"{p}/rest", f"{p}/residual"], [f"{p}/rests"], name=f"{p}/ScaleResidual"),
        node("Round", [f"{p}/rests"], [f"{p}/restr"], name=f"{p}/RoundResidual"),
        node("Unsqueeze", [f"{p}/hr", f"{p}/first_axis"], [f"{p}/hr1"], name=f"{p}/High"),
        node("Unsqueeze", [f"{p}/restr", f"{p}/first_axis"], [f"{p}/restr1"], name=f"{p}/Low"),
        node("Concat", [f"{p}/hr1", f"{p}/restr1"], [f"{p}/rows"], name=f"{p}/Rows", axis=0),
        node("Add", [f"{p}/rows", f"{p}/offset"], [f"{p}/hu"], name=f"{p}/Offset"),
        node("Cast", [f"{p}/hu"], [f"{p}/hq"], name=f"{p}/ToUint8", to=types.UINT8),
        node("MatMulInteger", [f"{p}/hq", f"{p}/weight", f"{p}/zero"], [f"{p}/acc"], name=f"{p}/MatMulInteger"),
        node("Split", [f"{p}/acc"], [f"{p}/acc_high", f"{p}/acc_low"], name=f"{p}/Split", **_halves(opset)),
        node("Cast", [f"{p}/acc_high"], [f"{p}/high"], name=f"{p}/HighToFloat", to=types.FLOAT),
        node("Cast", [f"{p}/acc_low"], [f"{p}/low"], name=f"{p}/LowToFloat", to=types.FLOAT),
        node("Mul", [f"{p}/low", f"{p}/residual_step"], [f"{p}/lows"], name=f"{p}/LowStep"),
        node("Add", [f"{p}/high", f"{p}/lows"], [f"{p}/sum"], name=f"{p}/Sum"),
        node("Squeeze", [f"{p}/sum", f"{p}/first_axis"], [f"{p}/accf"], name=f"{p}/Squeeze"),
        node("Mul", [f"{p}/accf", f"{p}/s"], [f"{p}/y"], name=f"{p}/RowScales"),
        node("Mul", [f"{p}/y", f"{p}/row_scales"], list(head.output), name=f"{p}/Columns"),
    ]


def _halves(opset: int) -> dict[str, int]:
    """``Split`` into two equal parts on axis 0: ``num_outputs`` from opset 18, equal parts by default before."""
    return {"axis": 0, "num_outputs": 2} if opset >= 18 else {"axis": 0}


def _embedding_nodes(node: Any, types: Any, embedding: Any) -> list[Any]:
    """The tied embedding's rows gathered from ``W'`` (a column of ``[K, N]`` each), times ``t`` and ``1 / d``."""
    p, e = PREFIX, f"{PREFIX}/embedding"
    ids = embedding.input[1]
    return [
        node("Gather", [f"{p}/weight", ids], [f"{e}/columns"], name=f"{e}/Gather", axis=1),
        node("Transpose", [f"{e}/columns"], [f"{e}/rows"], name=f"{e}/Transpose", perm=[1, 2, 0]),
        node("Cast", [f"{e}/rows"], [f"{e}/rowsf"], name=f"{e}/ToFloat", to=types.FLOAT),
        node("Gather", [f"{p}/row_scales", ids], [f"{e}/s"], name=f"{e}/GatherScales", axis=0),
        node("Unsqueeze", [f"{e}/s", f"{p}/last_axis"], [f"{e}/s1"], name=f"{e}/Unsqueeze"),
        node("Mul", [f"{e}/rowsf", f"{e}/s1"], [f"{e}/scaled"], name=f"{e}/Rows"),
        node("Mul", [f"{e}/scaled", f"{p}/equalise"], list(embedding.output), name=f"{e}/Unequalise"),
    ]


def matrix(path: Path) -> Floats:
    """The LM head of a rewritten graph as it computes it, ``[N, K]`` in float32 (``W' t / d``)."""
    from nrt.adapters.catalogue.builders.export import untyped

    onnx = untyped("onnx")
    numpy_helper = untyped("onnx.numpy_helper")
    wanted = {f"{PREFIX}/weight", f"{PREFIX}/row_scales", f"{PREFIX}/equalise"}
    held = {i.name: numpy_helper.to_array(i) for i in onnx.load(str(path)).graph.initializer if i.name in wanted}
    weights = held[f"{PREFIX}/weight"].T.astype(np.float32)
    rows: Floats = weights * held[f"{PREFIX}/row_scales"][:, None] * held[f"{PREFIX}/equalise"][None, :]
    return rows


def _opset(model: Any) -> int:
    return next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def _reduce_max(node: Any, opset: int, data: str, axes: str, output: str) -> Any:
    """``ReduceMax`` over the last axis, keeping it: axes as an input from opset 18, an attribute before."""
    name = f"{PREFIX}/ReduceMax"
    if opset >= 18:
        return node("ReduceMax", [data, axes], [output], name=name, keepdims=1)
    return node("ReduceMax", [data], [output], name=name, keepdims=1, axes=[-1])


def _tied_embedding(graph: Any, head: Any) -> Any:
    """The embedding gather that reads the head's bytes (None: none does); a string when something else
    reads them, which the pass cannot rewrite. The builder ties them as ``Reshape(weights)`` into one
    ``GatherBlockQuantized``, which also reads the head's scales."""
    readers = [n for n in graph.node if n is not head and any(i in head.input[1:] for i in n.input)]
    if not readers:
        return None
    tables = [r for r in readers if r.op_type == "Reshape" and r.input[0] == head.input[1]]
    gathers = [n for t in tables for n in graph.node if t.output[0] in n.input]
    tied = len(tables) == 1 and len(gathers) == 1 and gathers[0].op_type == "GatherBlockQuantized"
    if tied and all(r is tables[0] or r is gathers[0] for r in readers):
        return gathers[0]
    return f"the LM head's weights are read by {', '.join(sorted({r.op_type for r in readers}))}"


def equaliser(weights: Floats, power: float = EQUALISE_POWER) -> Floats:
    """``d[k] = max_n |W[n, k]| ** -power``, geometric mean 1 (a channel of zeros keeps 1)."""
    peaks = np.abs(weights).max(axis=0)
    d = np.where(peaks > 0, peaks, 1.0) ** -power
    equalise: Floats = (d / np.exp(np.log(d).mean())).astype(np.float32)
    return equalise


def _replace_node(graph: Any, old: Any, new: list[Any]) -> None:
    position = list(graph.node).index(old)
    graph.node.remove(old)
    for offset, node in enumerate(new):
        graph.node.insert(position + offset, node)


def _prune(graph: Any) -> None:
    """Drop the nodes whose outputs nothing reads (the old table's ``Reshape``) and the initializers no node reads."""
    outputs = {o.name for o in graph.output}
    while True:
        used = {name for node in graph.node for name in node.input} | outputs
        dead = [node for node in graph.node if not any(o in used for o in node.output)]
        if not dead:
            break
        for node in dead:
            graph.node.remove(node)
    used = {name for node in graph.node for name in node.input}
    for init in [init for init in graph.initializer if init.name not in used]:
        graph.initializer.remove(init)
