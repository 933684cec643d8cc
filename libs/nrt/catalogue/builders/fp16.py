"""The CUDA variant of a causal LM: the fp32 export converted to float16, and its check against fp32.

Weights, activations and the past/present key/values become float16 (half the bytes of
fp32 in GPU memory, and the tensor cores' type); the ``logits`` output stays float32 (a
final Cast), so sampling and the engine's logit arithmetic do not change. The conversion is
onnxruntime's own (``onnxruntime.transformers.float16``, it needs the ``onnx`` package of
the ``export`` extra), with its default list of ops kept in float32.

Float16 rounds each weight and activation to 11 significant bits, so the logits move a
little: :data:`LOGIT_TOLERANCE` bounds how far (relative to the logits' scale) on the
catalogue's models, and the greedy choice agrees with fp32 wherever fp32's best two
tokens are further apart than that. (CPU onnxruntime runs these graphs too, slowly: that
is how the builds check them on a host without a GPU.)
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import numpy.typing as npt

from nrt.catalogue.builders.export import quiet, untyped
from nrt.inference.artifact import CONFIG_FILE, TOKENIZER_FILE
from nrt.inference.errors import ArtifactError

LOGIT_TOLERANCE = 0.02  # max |fp16 - fp32| logit difference, relative to 1 + the largest |fp32 logit|
DETAIL = "float16 weights, activations and key/values (onnxruntime float16 converter); logits float32"


def convert_fp16(source: Path, target: Path) -> None:
    """Write ``source``'s graph with float16 weights and key/values to ``target`` (one self-contained file)."""
    onnx = untyped("onnx")
    float16 = untyped("onnxruntime.transformers.float16")
    model = onnx.load(str(source))
    with quiet():
        converted = float16.convert_float_to_float16(model, keep_io_types=["logits"])
    onnx.save(converted, str(target))


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
