"""A fused graph's weights taken from the GGUF it was built from, block for block, instead of quantised again.

A GGUF source reaches the model builder as a de-quantised checkpoint
(:mod:`nrt.adapters.catalogue.builders.gguf_checkpoint`); quantising that again to the builder's
own 4-bit blocks rounds weights that were already rounded (llama.cpp's ``Q4_K_M`` holds Gemma 3
270M's projections as 5-bit ``Q5_0``): on Gemma the perplexity rose 1.31x over the GGUF's own.
This pass gives every ``MatMulNBits`` of the builder's graph the GGUF's blocks instead, as
symmetric 8-bit blocks of 32 (``MatMulNBits`` has no 5- or 6-bit weights), and the tied
embedding gather the same bytes:

* ``Q8_0``, ``Q5_0``, ``Q4_0`` (``w = d * q``, ``q`` a signed integer): exactly, the block's ``d``
  the scale;
* ``Q6_K`` (two 16-weight sub-blocks of scale ``d * sc`` in each block of 32): the larger sub-block
  exactly (``q`` times 4), the other within an eighth of its larger neighbour's step;
* anything else (``Q4_K``'s sub-block minimums, ``Q5_K``, ``Q4_1``, floats): rounded to the block's
  largest magnitude over 127, an error under a sixteenth of a 4-bit step.

So the fused graph computes the model llama.cpp computes from the same file, and its perplexity is
the de-quantised checkpoint's (:data:`DETAIL`).

Builder names mapped (``/model/layers.{i}/...``): ``attn/qkv_proj`` (``attn_q``, ``attn_k``,
``attn_v`` stacked), ``attn/{q,k,v}_proj``, ``attn/o_proj`` (``attn_output``), ``mlp/gate_proj``,
``mlp/up_proj``, ``mlp/down_proj``, ``mlp/gate_up_proj`` and ``/lm_head`` (``output``, or the tied
``token_embd``).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from nrt.adapters.inference.errors import ArtifactError

BLOCK = 32
ZERO = 128  # the stored byte of a zero weight (MatMulNBits' default 8-bit zero point)
DETAIL = "the GGUF's own blocks as symmetric 8-bit MatMulNBits blocks of 32 (Q8_0, Q5_0, Q4_0 exact)"
_EXACT = ("Q8_0", "Q5_0", "Q4_0")  # w = d * q: the block's d is the scale
_LAYER = re.compile(r"^/model/layers\.(\d+)/(attn|mlp)/(\w+)/MatMul")
# builder name -> the GGUF tensors stacked into it, the first set the GGUF has
_SOURCES: dict[str, tuple[tuple[str, ...], ...]] = {
    "qkv_proj": (("attn_q", "attn_k", "attn_v"), ("attn_qkv",)),
    "q_proj": (("attn_q",),),
    "k_proj": (("attn_k",),),
    "v_proj": (("attn_v",),),
    "o_proj": (("attn_output",),),
    "gate_proj": (("ffn_gate",),),
    "up_proj": (("ffn_up",),),
    "down_proj": (("ffn_down",),),
    "gate_up_proj": (("ffn_gate", "ffn_up"), ("ffn_up",)),  # Phi-3's GGUF keeps gate and up as one ffn_up
}

Int8Matrix = npt.NDArray[np.uint8]
Floats = npt.NDArray[np.float32]
RowOrder = Callable[[str, npt.NDArray[Any]], npt.NDArray[Any]]


@dataclass(frozen=True)
class Transcoded:
    """What the pass did: matrices replaced, by the GGUF types they came from."""

    matrices: int
    types: dict[str, int]  # GGUF tensor type -> how many of the matrices' tensors had it

    def describe(self) -> str:
        """For the record's ``quantization_detail``."""
        kinds = ", ".join(f"{count} {kind}" for kind, count in sorted(self.types.items()))
        return f"{DETAIL} ({kinds} tensors)"


def gguf_blocks(tensor: Any) -> tuple[Int8Matrix, Floats]:
    """A GGUF matrix tensor (``N`` rows of ``K``) as ``MatMulNBits`` 8-bit symmetric blocks of 32: the
    bytes ``[N, K // 32, 32]`` (``q + 128``) and the scales ``[N, K // 32]``."""
    from gguf import GGMLQuantizationType, dequantize

    kind = GGMLQuantizationType(tensor.tensor_type)
    weights = dequantize(tensor.data, kind).astype(np.float32)
    rows, columns = weights.shape
    if columns % BLOCK:
        raise ArtifactError(f"GGUF tensor {tensor.name}: {columns} columns are not whole blocks of {BLOCK}")
    blocks = weights.reshape(rows, columns // BLOCK, BLOCK)
    if kind.name in _EXACT:
        raw = np.asarray(tensor.data).reshape(rows, -1).view(np.uint8)
        per_block = raw.shape[1] // (columns // BLOCK)
        scales = raw.reshape(rows, columns // BLOCK, per_block)[..., :2].copy().view(np.float16)[..., 0]
        scales = scales.astype(np.float32)
    elif kind.name == "Q6_K":
        halves = np.abs(blocks.reshape(rows, columns // BLOCK, 2, BLOCK // 2)).max(axis=-1)
        scales = halves.max(axis=-1) / 128.0  # |q - 32| <= 32: the larger half's q - 32 times 4
    else:
        scales = np.abs(blocks).max(axis=-1) / 127.0
    safe = np.where(scales == 0, 1.0, scales).astype(np.float32)
    q = np.clip(np.rint(blocks / safe[..., None]), -128, 127).astype(np.int16) + ZERO
    return q.astype(np.uint8), scales.astype(np.float32)


def transcode(path: Path, gguf: Path, rows: RowOrder | None = None) -> Transcoded:
    """Give the fused int8 graph in ``path`` (``model.onnx``, one file) the weights of ``gguf``; rewritten in
    place. ``rows(tensor name, array)`` puts a GGUF tensor's rows in the checkpoint's order (llama.cpp
    permutes Llama's query and key rows; transformers' GGUF reader undoes it). Each matrix must agree with
    the builder's own 8-bit one (the same weights, quantised once): else :class:`ArtifactError` and the
    file is left as it was."""
    from gguf import GGUFReader

    from nrt.adapters.catalogue.builders.export import save_model, untyped

    onnx = untyped("onnx")
    numpy_helper = untyped("onnx.numpy_helper")
    model = onnx.load(str(path))
    graph = model.graph
    reader = GGUFReader(gguf)
    tensors = {tensor.name: tensor for tensor in reader.tensors}
    initializers = {init.name: init for init in graph.initializer}
    types: Counter[str] = Counter()
    decoded: dict[str, tuple[Int8Matrix, Floats]] = {}

    def blocks(name: str) -> tuple[Int8Matrix, Floats]:  # each tensor decoded once (a tied embedding is the head)
        if name not in decoded:
            decoded[name] = _ordered(name, gguf_blocks(tensors[name]), rows)
        return decoded[name]

    replaced: set[str] = set()  # the initializers of B replaced
    shared = {name for node in graph.node if node.op_type != "MatMulNBits" for name in node.input}
    matrices = 0
    for node in graph.node:
        if node.op_type != "MatMulNBits":
            continue
        names = _gguf_names(node.name, tensors)
        if names is None:
            raise ArtifactError(f"no GGUF tensor for the graph's {node.name}")
        parts = [blocks(name) for name in names]
        types.update(tensors[name].tensor_type.name for name in names)
        q = np.concatenate([p[0] for p in parts], axis=0)
        scales = np.concatenate([p[1] for p in parts], axis=0)
        attributes = {a.name: a for a in node.attribute}
        n, k = int(attributes["N"].i), int(attributes["K"].i)
        if q.shape != (n, k // BLOCK, BLOCK):
            raise ArtifactError(f"{node.name}: the GGUF's {'+'.join(names)} is {q.shape}, the graph's N, K {n}, {k}")
        _agree(node.name, q, scales, _builders(node, initializers, numpy_helper))
        _replace(initializers, node.input[1], q, numpy_helper)
        _replace(initializers, node.input[2], scales.reshape(initializers[node.input[2]].dims), numpy_helper)
        if len(node.input) > 3 and node.input[3]:
            zero_points = node.input[3]
            node.input[3] = ""  # symmetric: MatMulNBits' default 8-bit zero point, its fast path
            if zero_points in shared:  # the tied embedding gather reads it: every block's zero, 128
                _replace(initializers, zero_points, np.full(scales.shape, ZERO, np.uint8), numpy_helper)
        attributes["bits"].i = 8
        attributes["block_size"].i = BLOCK
        replaced.add(node.input[1])
        matrices += 1
    _check_gathers(graph, replaced)
    _quantize_embedding(graph, initializers, tensors, blocks, numpy_helper, onnx.helper)
    used = {name for node in graph.node for name in node.input}
    for init in [init for init in graph.initializer if init.name not in used]:
        graph.initializer.remove(init)  # the zero points of the builder's asymmetric blocks
    save_model(model, path)
    return Transcoded(matrices, dict(types))


def _ordered(name: str, blocks: tuple[Int8Matrix, Floats], rows: RowOrder | None) -> tuple[Int8Matrix, Floats]:
    if rows is None:
        return blocks
    q, scales = blocks
    return np.ascontiguousarray(rows(name, q)), np.ascontiguousarray(rows(name, scales))


def _builders(node: Any, initializers: dict[str, Any], numpy_helper: Any) -> Floats:
    """The builder's own 8-bit matrix of ``node``, de-quantised: ``[N, K // 32, 32]``."""
    attributes = {a.name: a.i for a in node.attribute}
    if attributes.get("bits") != 8 or attributes.get("block_size") != BLOCK:
        raise ArtifactError(f"{node.name}: expected the builder's 8-bit blocks of {BLOCK}")
    return eight_bit_blocks(node, initializers, numpy_helper)


def eight_bit_blocks(node: Any, initializers: dict[str, Any], numpy_helper: Any) -> Floats:
    """An 8-bit ``MatMulNBits``' matrix de-quantised, ``[N, K / block, block]``: its bytes less their zero
    points (128 when it has none) times the blocks' scales."""
    attributes = {a.name: a.i for a in node.attribute}
    shape = (attributes["N"], -(-attributes["K"] // attributes["block_size"]), attributes["block_size"])
    q = numpy_helper.to_array(initializers[node.input[1]]).reshape(shape).astype(np.float32)
    scales = numpy_helper.to_array(initializers[node.input[2]]).astype(np.float32).reshape(q.shape[:2])
    if len(node.input) > 3 and node.input[3]:
        zero = numpy_helper.to_array(initializers[node.input[3]]).astype(np.float32).reshape(q.shape[:2])
    else:
        zero = np.full(q.shape[:2], ZERO, np.float32)
    weights: Floats = (q - zero[..., None]) * scales[..., None]
    return weights


AGREEMENT = 0.05  # |GGUF's - builder's| / |builder's| (Frobenius) at most: a wrong row order or tensor is ~1.4


def _agree(node: str, q: Int8Matrix, scales: Floats, builders: Floats) -> None:
    ours = (q.astype(np.float32) - ZERO) * scales[..., None]
    scale = float(np.linalg.norm(builders)) or 1.0
    difference = float(np.linalg.norm(ours - builders)) / scale
    if difference > AGREEMENT:
        raise ArtifactError(
            f"{node}: the GGUF's blocks differ from the checkpoint's weights by {difference:.3f} of their norm"
        )


def _gguf_names(node: str, tensors: dict[str, Any]) -> tuple[str, ...] | None:
    if node.startswith("/lm_head/"):
        name = "output.weight" if "output.weight" in tensors else "token_embd.weight"
        return (name,)
    match = _LAYER.match(node)
    if match is None or match.group(3) not in _SOURCES:
        return None
    for sources in _SOURCES[match.group(3)]:
        names = tuple(f"blk.{match.group(1)}.{source}.weight" for source in sources)
        if all(name in tensors for name in names):
            return names
    return None


def _replace(initializers: dict[str, Any], name: str, value: Any, numpy_helper: Any) -> None:
    old = initializers[name]
    new = numpy_helper.from_array(np.ascontiguousarray(value), name)
    old.CopyFrom(new)


def _quantize_embedding(
    graph: Any,
    initializers: dict[str, Any],
    tensors: dict[str, Any],
    blocks: Callable[[str], tuple[Int8Matrix, Floats]],
    numpy_helper: Any,
    helper: Any,
) -> None:
    """The builder's int8 graph gathers the embedding from a float32 table (671 MB on Gemma 3 270M): it
    gathers from the GGUF's 8-bit blocks instead (``GatherBlockQuantized``), the LM head's own bytes when
    the two are tied, as the builder's int4 graph does."""
    if "token_embd.weight" not in tensors:
        return
    node = next(
        (
            n
            for n in graph.node
            if n.op_type == "Gather" and n.input[0] in initializers and n.name.startswith("/model/")
        ),
        None,
    )
    if node is None or len(initializers[node.input[0]].dims) != 2:
        return
    table = initializers[node.input[0]]
    q, scales = blocks("token_embd.weight")
    if q.shape[0] != table.dims[0] or q.shape[1] * q.shape[2] != table.dims[1]:
        return
    builders = numpy_helper.to_array(table).astype(np.float32).reshape(q.shape)
    _agree(node.name, q, scales, builders)
    prefix = "/model/embed_tokens/gguf"
    head = next((n for n in graph.node if n.op_type == "MatMulNBits" and n.name.startswith("/lm_head/")), None)
    tied = head is not None and "output.weight" not in tensors
    if tied:
        assert head is not None
        data, scale_name = head.input[1], head.input[2]
    else:
        data, scale_name = f"{prefix}.q", f"{prefix}.scales"
        graph.initializer.extend([numpy_helper.from_array(q, data), numpy_helper.from_array(scales, scale_name)])
    shape, zero = f"{prefix}.shape", f"{prefix}.zero_points"
    graph.initializer.extend(
        [
            numpy_helper.from_array(np.array(table.dims, dtype=np.int64), shape),
            numpy_helper.from_array(np.full(scales.shape, ZERO, np.uint8), zero),
        ]
    )
    reshape = helper.make_node("Reshape", [data, shape], [f"{prefix}/table"], name=f"{prefix}/Reshape")
    gather = helper.make_node(
        "GatherBlockQuantized",
        [f"{prefix}/table", node.input[1], scale_name, zero],
        list(node.output),
        name=f"{prefix}/GatherBlockQuantized",
        domain="com.microsoft",
        bits=8,
        block_size=BLOCK,
        gather_axis=0,
        quantize_axis=1,
    )
    position = list(graph.node).index(node)
    graph.node.remove(node)
    graph.node.insert(position, gather)
    graph.node.insert(position, reshape)


def _check_gathers(graph: Any, replaced: set[str]) -> None:
    """An embedding gather (``GatherBlockQuantized``) reading a replaced matrix (the tied LM head, through a
    ``Reshape`` to rows x columns) must already read 8-bit blocks of 32: the builder keeps the LM head at
    8 bits in every precision this pass is used for."""
    producers = {output: node for node in graph.node for output in node.output}
    for node in graph.node:
        if node.op_type != "GatherBlockQuantized":
            continue
        source = producers.get(node.input[0])
        data = source.input[0] if source is not None and source.op_type == "Reshape" else node.input[0]
        attributes = {a.name: a.i for a in node.attribute}
        if data in replaced and (attributes.get("bits") != 8 or attributes.get("block_size") != BLOCK):
            raise ArtifactError(f"{node.name} reads {data} as {attributes.get('bits')}-bit blocks: expected 8-bit")
