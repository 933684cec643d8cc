"""Describe a local ONNX export directory (optimum layout) as an artifact.

Expected: ``model.onnx`` (with ``model.onnx_data`` when its weights exceed 2 GB), ``tokenizer.json`` and, for a causal LM,
``config.json`` (context length and special token ids; ``generation_config.json`` wins for
the end-of-sequence ids when present). The kind follows from the graph: past key/value
inputs make a causal LM, a ``last_hidden_state`` output an encoder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
from tokenizers import Tokenizer

from nrt.adapters.catalogue.describe import causal_lm_record, encoder_record
from nrt.adapters.catalogue.record import ArtifactRecord, Quantization
from nrt.adapters.catalogue.signature import read_signature
from nrt.adapters.inference.artifact import CONFIG_FILE, MODEL_FILE, TOKENIZER_FILE, HFConfig, read_hf_config
from nrt.adapters.inference.errors import ArtifactError

RECIPE = "local-onnx/1"
_INT8_DYNAMIC_OPS = frozenset({"MatMulInteger", "DynamicQuantizeMatMul", "DynamicQuantizeLinear"})
_OTHER_QUANTIZED_OPS = frozenset({"QLinearMatMul", "QuantizeLinear", "MatMulNBits", "GatherBlockQuantized"})


class _GenerationConfig(msgspec.Struct):
    eos_token_id: int | list[int] | None = None


class _SentenceBertConfig(msgspec.Struct):
    max_seq_length: int | None = None


class _Module(msgspec.Struct):
    type: str = ""


def describe_local(directory: Path) -> ArtifactRecord:
    """An artifact record for ``directory`` (files not yet filled in); :class:`ArtifactError` when unusable."""
    record = _describe(directory)
    if record.config is not None and not (directory / record.config).is_file():
        record = msgspec.structs.replace(record, config=None)
    return record


def _describe(directory: Path) -> ArtifactRecord:
    model = directory / MODEL_FILE
    if not model.is_file():
        onnx_files = sorted(path.name for path in directory.glob("*.onnx"))
        found = f" (found {', '.join(onnx_files)})" if onnx_files else ""
        raise ArtifactError(
            f"{directory} has no {MODEL_FILE}{found}: export it with optimum-onnx "
            f"(optimum-cli export onnx --task text-generation-with-past|feature-extraction)"
        )
    if not (directory / TOKENIZER_FILE).is_file():
        raise ArtifactError(f"{directory} has no {TOKENIZER_FILE} (a tokenizers-library tokenizer)")
    signature = read_signature(model)
    tokenizer = Tokenizer.from_file(str(directory / TOKENIZER_FILE))
    adds_special = tokenizer.encode("a").ids != tokenizer.encode("a", add_special_tokens=False).ids
    name = directory.name
    source = f"local:{directory}"
    if signature.past_inputs:
        config = _text_config(directory)
        context_length = config.max_position_embeddings or config.n_positions
        if context_length is None:
            raise ArtifactError(f"{directory / CONFIG_FILE} gives no max_position_embeddings (the context length)")
        eos = _eos(directory, config)
        quantization = _quantization(model)
        record = causal_lm_record(
            signature,
            name=name,
            source=source,
            recipe=RECIPE,
            context_length=context_length,
            bos_token_id=config.bos_token_id,
            eos_token_ids=eos,
            pad_token_id=config.pad_token_id,
            quantization=quantization,
            tokenizer_adds_special_tokens=adds_special,
            vocab_size=config.vocab_size,
        )
        # a float16 graph is what a GPU runs; CPU onnxruntime runs it too, slowly
        return msgspec.structs.replace(record, provider="cuda" if quantization == "fp16" else "cpu")
    if signature.output("last_hidden_state") is not None:
        return encoder_record(
            signature,
            name=name,
            source=source,
            recipe=RECIPE,
            context_length=_encoder_context(directory),
            pooling="mean",
            normalize=_normalizes(directory),
            tokenizer_adds_special_tokens=adds_special,
            pad_token_id=_encoder_pad(directory, tokenizer),
        )
    raise ArtifactError(
        f"{directory}/{MODEL_FILE} is neither a decoder with past key values (inputs past_key_values.*) nor an "
        f"encoder with a last_hidden_state output; outputs: {', '.join(signature.output_names)}"
    )


def _read(path: Path, kind: type[Any]) -> Any:
    if not path.is_file():
        return kind()
    try:
        return msgspec.json.decode(path.read_bytes(), type=kind)
    except msgspec.DecodeError as exc:
        raise ArtifactError(f"{path}: {exc}") from exc


def _text_config(directory: Path) -> HFConfig:
    if not (directory / CONFIG_FILE).is_file():
        raise ArtifactError(f"{directory} has no {CONFIG_FILE} (needed for the context length and special token ids)")
    return read_hf_config(directory)


def _eos(directory: Path, config: HFConfig) -> tuple[int, ...]:
    generation: _GenerationConfig = _read(directory / "generation_config.json", _GenerationConfig)
    value = generation.eos_token_id if generation.eos_token_id is not None else config.eos_token_id
    if value is None:
        raise ArtifactError(f"{directory}: neither config.json nor generation_config.json gives eos_token_id")
    return (value,) if isinstance(value, int) else tuple(value)


def _encoder_context(directory: Path) -> int:
    sentence: _SentenceBertConfig = _read(directory / "sentence_bert_config.json", _SentenceBertConfig)
    if sentence.max_seq_length is not None:
        return sentence.max_seq_length
    config = _text_config(directory)
    if config.max_position_embeddings is None:
        raise ArtifactError(f"{directory / CONFIG_FILE} gives no max_position_embeddings")
    return config.max_position_embeddings


def _encoder_pad(directory: Path, tokenizer: Tokenizer) -> int | None:
    padding = tokenizer.padding
    if padding is not None:
        return int(padding["pad_id"])
    if (directory / CONFIG_FILE).is_file():
        return _text_config(directory).pad_token_id
    return None


def _normalizes(directory: Path) -> bool:
    """Sentence-transformers directories say whether they normalise; plain exports are assumed to."""
    path = directory / "modules.json"
    if not path.is_file():
        return True
    try:
        modules = msgspec.json.decode(path.read_bytes(), type=list[_Module])
    except msgspec.DecodeError as exc:
        raise ArtifactError(f"{path}: {exc}") from exc
    return any(module.type.endswith(".Normalize") for module in modules)


def _quantization(model: Path) -> Quantization:
    """From the graph's ops and weight types; ``unknown`` when it cannot tell (or without the onnx package)."""
    try:
        import onnx
    except ImportError:
        return "unknown"
    graph = onnx.load(str(model), load_external_data=False).graph
    ops = {node.op_type for node in graph.node}
    if ops & _INT8_DYNAMIC_OPS:
        return "int8-dynamic"
    weight_types = {init.data_type for init in graph.initializer}
    if ops & _OTHER_QUANTIZED_OPS or onnx.TensorProto.BFLOAT16 in weight_types:
        return "unknown"
    if onnx.TensorProto.FLOAT16 in weight_types:
        return "fp16"
    return "fp32"
