"""Read what the engine needs to know about a model artifact directory.

An artifact directory holds ``model.onnx`` (with ``model.onnx_data`` beside it when its weights exceed 2 GB), ``tokenizer.json``,
``config.json`` and, when prepared by the catalogue, ``nrt-artifact.json``. Dimensions are
read from the ONNX graph first (the ground truth), then ``nrt-artifact.json``, then
``config.json``: the runtime never needs torch or transformers.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import msgspec
import onnxruntime as ort

from nrt.adapters.inference.errors import ArtifactError

LOGITS_TO_KEEP = "logits_to_keep"  # optional input: the LM head projects only the last N positions (0: all)
MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "config.json"
RECORD_FILE = "nrt-artifact.json"

ModelKind = Literal["causal-lm", "encoder"]

# optimum's ``text-generation-with-past`` names: one key and one value tensor per layer
PAST_RE = re.compile(r"^past_key_values\.(\d+)\.(key|value)$")
PRESENT_RE = re.compile(r"^present\.(\d+)\.(key|value)$")

_NUMPY_DTYPES = {
    "tensor(float)": "float32",
    "tensor(float16)": "float16",
    "tensor(double)": "float64",
    "tensor(bfloat16)": "bfloat16",
    "tensor(int64)": "int64",
    "tensor(int32)": "int32",
    "tensor(bool)": "bool",
}


class ArtifactRecord(msgspec.Struct, frozen=True):
    """The catalogue's ``nrt-artifact.json`` (every field optional; unknown fields ignored)."""

    kind: ModelKind | None = None
    context_length: int | None = None
    num_layers: int | None = None
    num_kv_heads: int | None = None
    head_dim: int | None = None
    vocab_size: int | None = None
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    eos_token_ids: list[int] | None = None
    pad_token_id: int | None = None
    tokenizer_adds_special_tokens: bool | None = None  # False: the engine prepends BOS itself


class HFConfig(msgspec.Struct, frozen=True):
    """The fields of a transformers ``config.json`` the engine may fall back to."""

    model_type: str | None = None
    num_hidden_layers: int | None = None
    num_attention_heads: int | None = None
    num_key_value_heads: int | None = None
    hidden_size: int | None = None
    head_dim: int | None = None
    vocab_size: int | None = None
    max_position_embeddings: int | None = None
    n_positions: int | None = None  # GPT-2 style name of the context length
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    pad_token_id: int | None = None


class GraphSignature(msgspec.Struct, frozen=True):
    """Names and element types of a causal-LM graph's inputs and outputs."""

    input_names: tuple[str, ...]
    past_names: tuple[str, ...]  # past_key_values.{i}.key, .value, ... in layer order
    present_names: tuple[str, ...]  # present.{i}.key, .value, ... matching past_names
    has_position_ids: bool
    has_use_cache_branch: bool
    has_logits_to_keep: bool  # the LM head projects only the last N positions (0: all)
    ids_dtype: str  # numpy dtype name of input_ids / attention_mask / position_ids
    kv_dtype: str  # numpy dtype name of the past key/value tensors
    logits_dtype: str  # numpy dtype name of the logits output
    vocab_size: int | None  # from the logits output shape when static
    num_kv_heads: int | None  # from the past input shape when static
    head_dim: int | None


class CausalSpec(msgspec.Struct, frozen=True):
    """Everything the generation loop needs about a causal LM."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    context_length: int
    bos_token_id: int | None
    eos_token_ids: tuple[int, ...]
    pad_token_id: int


def read_record(model_dir: Path) -> ArtifactRecord:
    """``nrt-artifact.json`` when present, else an empty record."""
    path = model_dir / RECORD_FILE
    if not path.is_file():
        return ArtifactRecord()
    try:
        return msgspec.json.decode(path.read_bytes(), type=ArtifactRecord)
    except msgspec.ValidationError as exc:
        raise ArtifactError(f"{path}: {exc}") from exc


def read_hf_config(model_dir: Path) -> HFConfig:
    """``config.json`` when present (nested ``text_config`` is used for multimodal wrappers)."""
    path = model_dir / CONFIG_FILE
    if not path.is_file():
        return HFConfig()
    raw = path.read_bytes()
    try:
        nested = msgspec.json.decode(raw, type=_NestedConfig)
    except msgspec.DecodeError as exc:
        raise ArtifactError(f"{path}: not valid JSON ({exc})") from exc
    if nested.text_config is not None and nested.num_hidden_layers is None:
        return nested.text_config
    return msgspec.json.decode(raw, type=HFConfig)


class _NestedConfig(msgspec.Struct, frozen=True):
    num_hidden_layers: int | None = None
    text_config: HFConfig | None = None


# where ``model.onnx`` keeps its weights when they exceed protobuf's 2 GB (ONNX external data), as
# optimum and onnx write them
EXTERNAL_DATA_FILES = ("model.onnx_data", "model.onnx.data")


def external_data_files(model_dir: Path) -> tuple[str, ...]:
    """The external data files beside ``model.onnx`` in ``model_dir`` (none for a self-contained model)."""
    return tuple(name for name in EXTERNAL_DATA_FILES if (model_dir / name).is_file())


def require_file(model_dir: Path, name: str) -> Path:
    path = model_dir / name
    if not path.is_file():
        raise ArtifactError(f"{model_dir} has no {name}; is this an NRT/optimum ONNX export dir?")
    return path


def numpy_dtype(onnx_type: str) -> str | None:
    """``tensor(float)`` -> ``float32``; None for an element type the engine does not know."""
    return _NUMPY_DTYPES.get(onnx_type)


def static_dim(dim: object) -> int | None:
    """A fixed axis length, or None for a symbolic or unknown one."""
    return dim if isinstance(dim, int) and dim > 0 else None


def layer_names(names: Sequence[str], pattern: re.Pattern[str]) -> tuple[str, ...]:
    """The names matching ``PAST_RE`` or ``PRESENT_RE``, in layer order, key before value."""
    found: dict[tuple[int, int], str] = {}
    for name in names:
        match = pattern.match(name)
        if match:
            found[(int(match.group(1)), 0 if match.group(2) == "key" else 1)] = name
    return tuple(found[key] for key in sorted(found))


def read_signature(session: ort.InferenceSession) -> GraphSignature:
    """Introspect a causal-LM graph (optimum ``text-generation-with-past`` layout)."""
    inputs = {i.name: i for i in session.get_inputs()}
    outputs = {o.name: o for o in session.get_outputs()}
    if "input_ids" not in inputs or "logits" not in outputs:
        raise ArtifactError("the ONNX graph has no input_ids input or no logits output")
    past_names = layer_names(list(inputs), PAST_RE)
    present_names = layer_names(list(outputs), PRESENT_RE)
    if not past_names or len(past_names) != len(present_names) or len(past_names) % 2:
        raise ArtifactError(
            "the ONNX graph has no matching past_key_values.{i}.key/value inputs and "
            "present.{i}.key/value outputs; export it with task text-generation-with-past"
        )
    past0 = inputs[past_names[0]]
    logits_shape = outputs["logits"].shape
    return GraphSignature(
        input_names=tuple(inputs),
        past_names=past_names,
        present_names=present_names,
        has_position_ids="position_ids" in inputs,
        has_use_cache_branch="use_cache_branch" in inputs,
        has_logits_to_keep=LOGITS_TO_KEEP in inputs,
        ids_dtype=numpy_dtype(inputs["input_ids"].type) or "int64",
        kv_dtype=numpy_dtype(past0.type) or "float32",
        logits_dtype=numpy_dtype(outputs["logits"].type) or "float32",
        vocab_size=static_dim(logits_shape[-1]) if logits_shape else None,
        num_kv_heads=static_dim(past0.shape[1]) if len(past0.shape) == 4 else None,
        head_dim=static_dim(past0.shape[3]) if len(past0.shape) == 4 else None,
    )


def _first(*values: int | None) -> int | None:
    for value in values:
        if value is not None:
            return value
    return None


def _eos_list(value: int | list[int] | None) -> tuple[int, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, int) else tuple(value)


def causal_spec(model_dir: Path, signature: GraphSignature) -> CausalSpec:
    """Combine graph, ``nrt-artifact.json`` and ``config.json`` into one spec (graph wins)."""
    record = read_record(model_dir)
    config = read_hf_config(model_dir)
    config_head_dim = config.head_dim
    if config_head_dim is None and config.hidden_size and config.num_attention_heads:
        config_head_dim = config.hidden_size // config.num_attention_heads
    num_layers = len(signature.past_names) // 2
    num_kv_heads = _first(signature.num_kv_heads, record.num_kv_heads, config.num_key_value_heads)
    num_kv_heads = _first(num_kv_heads, config.num_attention_heads)
    head_dim = _first(signature.head_dim, record.head_dim, config_head_dim)
    vocab_size = _first(signature.vocab_size, record.vocab_size, config.vocab_size)
    context_length = _first(record.context_length, config.max_position_embeddings)
    missing = [
        name
        for name, value in (
            ("num_kv_heads", num_kv_heads),
            ("head_dim", head_dim),
            ("vocab_size", vocab_size),
            ("context_length", context_length),
        )
        if value is None
    ]
    if missing or num_kv_heads is None or head_dim is None:
        raise ArtifactError(
            f"{model_dir}: cannot determine {', '.join(missing)} from the ONNX graph, {RECORD_FILE} or {CONFIG_FILE}"
        )
    assert vocab_size is not None
    assert context_length is not None
    eos = record.eos_token_ids or list(_eos_list(record.eos_token_id))
    eos_ids = tuple(eos) if eos else _eos_list(config.eos_token_id)
    pad = _first(record.pad_token_id, config.pad_token_id, eos_ids[0] if eos_ids else None, 0)
    assert pad is not None
    return CausalSpec(
        num_layers=num_layers,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        vocab_size=vocab_size,
        context_length=context_length,
        bos_token_id=_first(record.bos_token_id, config.bos_token_id),
        eos_token_ids=eos_ids,
        pad_token_id=pad,
    )
