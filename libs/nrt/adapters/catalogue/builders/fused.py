"""Fused decoder graphs: a causal LM built by ONNX Runtime's own model builder (onnxruntime-genai).

The optimum export (:mod:`nrt.adapters.catalogue.builders.export`) writes the transformers modules
op by op: on Gemma 3 270M about 2,000 shape and element-wise nodes around the attention. The
model builder writes the layout ONNX Runtime's CPU kernels are made for: one
``GroupQueryAttention`` per layer (rotary embedding inside it, the key/value cache in and out),
``SkipSimplifiedLayerNormalization`` (residual add and RMSNorm in one), ``MatMulNBits`` weights
(int4 or int8 blocks of 32, q/k/v as one matrix) and a quantised embedding gather: about 360
nodes. Its LM head, once its weights are final, becomes an integer matrix product
(:func:`with_integer_head`, :mod:`nrt.adapters.catalogue.builders.integer_head`).

The graph's interface differs from the optimum layout in two ways the engine handles:

- no ``position_ids``: positions come from the attention mask (each row's sequence length is
  the mask's sum), so a batch is padded on the *right* (``BatchKV.right_padded``, found by
  ``CausalLM.right_padded``'s probe);
- ``past_key_values.{i}.key/value`` and ``present.{i}.key/value`` are ``[batch, kv_heads,
  length, head_dim]`` as in the optimum layout (built with ``windowed_kv_cache=false``: the
  builder's windowed cache for sliding-window layers needs a pre-allocated buffer of the
  window's size, a layout the engine does not drive).

The builder targets a newer transformers than the one pinned here: it is run in a child process
(:mod:`nrt.adapters.catalogue.builders.genai_builder`) that stands in for the few names it
imports and does not use. It needs ``onnxruntime-genai`` and ``onnx-ir`` (the ``bench`` extra);
without them, or for an architecture it lacks, the checkpoint is exported with optimum instead
and the record says so.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Literal

from nrt.adapters.inference.artifact import CONFIG_FILE, MODEL_FILE
from nrt.adapters.inference.errors import ArtifactError

Precision = Literal["int4", "int8", "fp32"]
# config.json ``architectures[0]`` the builder writes (the checkpoints' decoders it shares with optimum)
ARCHITECTURES = (
    "LlamaForCausalLM",
    "MistralForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
    "Phi3ForCausalLM",
    "GemmaForCausalLM",
    "Gemma2ForCausalLM",
    "Gemma3ForCausalLM",
    "GraniteForCausalLM",
    "SmolLM3ForCausalLM",
)
DETAIL_PREFIX = "fused graph"  # a fused variant's quantization_detail starts so (a fallback's: "optimum export")
BUILDER_DATA = "model.onnx.data"  # the builder's external weights, folded into model.onnx afterwards


def builder_missing() -> str | None:
    """None when the model builder can run here, else why not."""
    import importlib.util

    for module, package in (("onnxruntime_genai", "onnxruntime-genai"), ("onnx_ir", "onnx-ir")):
        if importlib.util.find_spec(module) is None:  # found, not imported: genai's package loads a native library
            return f"{package} is not installed (scripts/bootstrap installs it with the export extra)"
    return None


def architecture(checkpoint: Path) -> str:
    config = json.loads((checkpoint / CONFIG_FILE).read_text(encoding="utf-8"))
    names = config.get("architectures") or []
    return str(names[0]) if names else ""


def unsupported(checkpoint: Path) -> str | None:
    """None when the builder can build the checkpoint in ``checkpoint``, else why not (the fallback's reason)."""
    missing = builder_missing()
    if missing:
        return missing
    name = architecture(checkpoint)
    if name not in ARCHITECTURES:
        return f"the model builder has no {name or 'unnamed'} architecture"
    return None


# int4 as llama.cpp's Q4_K_M keeps it: k-quant 4-bit blocks, the LM head (the largest matrix, output-sensitive)
# and llama.cpp's most quantisation-sensitive layers at 8 bits; blocks of 16 weights. Gemma 3 270M (perplexity
# of bench.models.DOCUMENT over its de-quantised checkpoint's 22.98): blocks of 32 gave 1.32x, blocks of 16
# 1.11x (issue 26's bound: 1.15x) at about 0.9x their decode speed; the LM head at 4 bits too, 1.51x (32) and
# 1.15x (16). Plain RTN int4 everywhere misses the int4 check against PyTorch (0.94 of the logits' scale).
INT4_OPTIONS = ("algo_config=k_quant_mixed", "block_size=16")


def detail(precision: Precision, weights: str | None = None) -> str:
    """The record's ``quantization_detail`` of a fused graph: which path built it, and its weights (the
    builder's own for ``precision`` unless ``weights`` says otherwise)."""
    own = {
        "int4": "MatMulNBits k-quant int4 blocks of 16, the LM head and llama.cpp's mixed layers int8",
        "int8": "MatMulNBits int8 blocks of 32",
        "fp32": "fp32",
    }
    version = metadata.version("onnxruntime-genai")
    return (
        f"{DETAIL_PREFIX} (onnxruntime-genai {version} model builder: GroupQueryAttention, "
        f"SkipSimplifiedLayerNormalization, {weights or own[precision]} weights)"
    )


def build_fused(checkpoint: Path, target: Path, precision: Precision, work: Path) -> None:
    """Build the fused graph of the checkpoint in ``checkpoint`` into ``target/model.onnx`` (one file,
    with a ``logits_to_keep`` input); ``work`` holds the builder's output and cache."""
    from nrt.adapters.catalogue.builders.logits import add_logits_to_keep

    output = work / f"fused-{precision}"
    command = [
        sys.executable,
        "-m",
        "nrt.adapters.catalogue.builders.genai_builder",
        "-i",
        str(checkpoint),
        "-o",
        str(output),
        "-p",
        precision,
        "-e",
        "cpu",
        "-c",
        str(work / "builder-cache"),
        "--extra_options",
        "windowed_kv_cache=false",
        *(INT4_OPTIONS if precision == "int4" else ()),
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0 or not (output / MODEL_FILE).is_file():
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        raise ArtifactError(f"the model builder failed on {checkpoint}: {' / '.join(tail)}")
    target.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(output / MODEL_FILE, target / MODEL_FILE)
    if (output / BUILDER_DATA).is_file():
        shutil.copyfile(output / BUILDER_DATA, target / BUILDER_DATA)
    add_logits_to_keep(target / MODEL_FILE)  # loads the external weights, saves one file (or model.onnx_data)
    (target / BUILDER_DATA).unlink(missing_ok=True)
    fix_head_dim(target / MODEL_FILE, head_dim(checkpoint))


def with_integer_head(target: Path, detail: str) -> str:
    """Rewrite the LM head of the fused graph in ``target`` (:mod:`nrt.adapters.catalogue.builders.integer_head`),
    after its weights are final; ``detail`` with what became of the head."""
    from nrt.adapters.catalogue.builders.integer_head import rewrite

    rewritten = rewrite(target / MODEL_FILE)
    if rewritten.detail is None:
        return f"{detail}; the LM head as built ({rewritten.skipped})"
    return f"{detail}; {rewritten.detail}"


def head_dim(checkpoint: Path) -> int:
    config = json.loads((checkpoint / CONFIG_FILE).read_text(encoding="utf-8"))
    value = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    return int(value)


def fix_head_dim(path: Path, size: int) -> None:
    """Make the cache tensors' last axis static (the builder names it ``kv_cache_dim``): the record and
    the engine read the head size from the graph."""
    from nrt.adapters.catalogue.builders.export import save_model, untyped

    model = untyped("onnx").load(str(path))
    graph = model.graph
    for value in (*graph.input, *graph.output):
        if value.name.startswith(("past_key_values.", "present.")):
            value.type.tensor_type.shape.dim[3].dim_value = size
    save_model(model, path)
