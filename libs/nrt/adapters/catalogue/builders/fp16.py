"""The CUDA variant of a causal LM: fp16 weights in the fp32 export's graph, and its check against fp32.

Every weight matrix (each ``MatMul`` by an initializer, and the embedding table read by
``Gather``) is stored in float16: half the bytes in GPU memory, and half-precision matmuls
for the tensor cores. Each such op gets its input cast to float16 and its output cast back
to float32; everything between them (the residual stream, the norms, attention scores,
softmax, the key/values and the logits) stays float32.

Why not a graph that is float16 throughout (``onnxruntime.transformers.float16``): Gemma
3's residual stream reaches about 1.0e5 on an ordinary prompt (measured on the 270M model;
float16 ends at 65504), so the all-fp16 graph overflows and its logits are wrong (0.32 of
their scale off fp32; the converter's op block list cannot keep a chain of ops in fp32
without casting to fp16 between them). The matmuls' inputs and outputs stay far below
the limit, which is what this mixed form relies on, for any model.

Float16 rounds each weight and matmul input to 11 significant bits, so the logits move a
little: :data:`LOGIT_TOLERANCE` bounds how far (relative to the logits' scale), and the
greedy choice agrees with fp32 wherever fp32's best two tokens are further apart than
that. CPU onnxruntime runs these graphs too (slowly): that is how the builds check them on
a host without a GPU.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from nrt.adapters.catalogue.builders.export import save_model, untyped
from nrt.adapters.catalogue.builders.logits import add_logits_to_keep
from nrt.adapters.inference.artifact import CONFIG_FILE, MODEL_FILE, TOKENIZER_FILE
from nrt.adapters.inference.errors import ArtifactError

LOGIT_TOLERANCE = 0.005  # max |fp16 - fp32| logit difference, relative to 1 + the largest |fp32 logit|
DETAIL = (
    "float16 weights (every MatMul by a weight and the embedding Gather, inputs cast to float16 and "
    "outputs back); residual stream, norms, attention, key/values and logits float32"
)


class Fp16Report(msgspec.Struct, frozen=True):
    matmuls: int  # MatMul by a weight -> Cast, float16 MatMul, Cast
    gathers: int  # embedding Gather -> float16 table, Cast


def convert_fp16(source: Path, target: Path, *, min_elements: int = 1024) -> Fp16Report:
    """Write ``source``'s graph with float16 weight matrices to ``target`` (one file, or with a data file over 2 GB);
    weights under ``min_elements`` values stay float32."""
    onnx = untyped("onnx")
    numpy_helper = untyped("onnx.numpy_helper")
    model = onnx.load(str(source))
    graph = model.graph
    initializers = {init.name: init for init in graph.initializer}
    halves: dict[str, str] = {}  # fp32 initializer -> its fp16 copy
    added: list[Any] = []

    def half(name: str) -> str | None:
        init = initializers.get(name)
        if init is None or init.data_type != onnx.TensorProto.FLOAT or len(init.dims) != 2:
            return None
        if int(np.prod(init.dims)) < min_elements:
            return None
        if name not in halves:
            array: npt.NDArray[np.float32] = numpy_helper.to_array(init)
            if float(np.abs(array).max()) > float(np.finfo(np.float16).max):
                return None
            halves[name] = f"{name}/fp16"
            added.append(numpy_helper.from_array(array.astype(np.float16), halves[name]))
        return halves[name]

    def cast(source_name: str, target_name: str, to: int) -> Any:
        return onnx.helper.make_node("Cast", [source_name], [target_name], name=f"{target_name}/cast", to=to)

    fp16, fp32 = onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT
    nodes: list[Any] = []
    matmuls = gathers = 0
    for node in graph.node:
        base = node.name or node.output[0]
        if node.op_type == "MatMul" and (weight := half(node.input[1])) is not None:
            nodes += [
                cast(node.input[0], f"{base}/input_fp16", fp16),
                onnx.helper.make_node(
                    "MatMul", [f"{base}/input_fp16", weight], [f"{base}/output_fp16"], name=f"{base}/fp16"
                ),
                cast(f"{base}/output_fp16", node.output[0], fp32),
            ]
            matmuls += 1
        elif node.op_type == "Gather" and _axis(node) == 0 and (table := half(node.input[0])) is not None:
            nodes += [
                onnx.helper.make_node(
                    "Gather", [table, node.input[1]], [f"{base}/output_fp16"], name=f"{base}/fp16", axis=0
                ),
                cast(f"{base}/output_fp16", node.output[0], fp32),
            ]
            gathers += 1
        else:
            nodes.append(node)
    used = {name for node in nodes for name in node.input}
    kept = [init for init in graph.initializer if init.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept + added)
    del graph.node[:]
    graph.node.extend(nodes)
    save_model(model, target)
    return Fp16Report(matmuls=matmuls, gathers=gathers)


def _axis(node: Any) -> int:
    return next((int(attr.i) for attr in node.attribute if attr.name == "axis"), 0)


def write_cuda_variant(export: Path, target: Path) -> Fp16Report:
    """Write the cuda variant of ``export`` into ``target``: fp16 weight matrices, a
    ``logits_to_keep`` input, and the tokenizer and config beside it."""
    report = convert_fp16(export / MODEL_FILE, target / MODEL_FILE)
    add_logits_to_keep(target / MODEL_FILE)
    copy_companions(export, target)
    return report


def copy_companions(source: Path, target: Path) -> None:
    """The tokenizer and config travel with every variant: each variant directory is a complete artifact."""
    for name in (TOKENIZER_FILE, CONFIG_FILE):
        shutil.copyfile(source / name, target / name)


def logit_error(reference: npt.NDArray[np.floating], candidate: npt.NDArray[np.floating]) -> float:
    """Max |candidate - reference|, relative to 1 + the largest |reference| logit."""
    scale = 1.0 + float(np.abs(reference).max())
    return float(np.abs(candidate.astype(np.float64) - reference.astype(np.float64)).max()) / scale


def check_logits(reference: npt.NDArray[np.floating], candidate: npt.NDArray[np.floating], what: str) -> None:
    """The float16 logits must be finite and within :data:`LOGIT_TOLERANCE` of the fp32 ones."""
    if not np.isfinite(candidate).all():
        raise ArtifactError(f"{what}: the float16 graph overflows (non-finite logits)")
    error = logit_error(reference, candidate)
    if error > LOGIT_TOLERANCE:
        raise ArtifactError(
            f"{what}: float16 logits differ from fp32 by {error:.4f} of their scale (> {LOGIT_TOLERANCE})"
        )
