"""Real GGUF files for tests: a tiny random Hugging Face checkpoint (:mod:`nrt.testing.hf_checkpoints`)
written as llama.cpp's ``convert_hf_to_gguf.py`` writes it, with the ``gguf`` package's ``GGUFWriter``.

What llama.cpp does and a reader must undo is done here too: its architecture names (Mistral is
``llama``, Gemma 3's text model is ``gemma3``), its tensor names (``blk.N.attn_q.weight``...), the
row permutation of Llama's query and key projections (for its rotary embedding), Gemma's norm
weights stored as ``1 + w``, no ``output.weight`` when the embeddings are tied, and the tokenizer
as ``tokenizer.ggml.*`` metadata (a byte-level BPE is ``gpt2``: tokens, types, merges) with the
chat template. Tensors are F32, or BF16, or Q8_0 where a row splits into its 32-value blocks.
"""

from __future__ import annotations

import importlib
import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from nrt.testing.hf_checkpoints import save_checkpoint

# model_type -> llama.cpp's architecture name for it
GGUF_ARCHITECTURES = {
    "llama": "llama",
    "mistral": "llama",
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "phi3": "phi3",
    "gemma2": "gemma2",
    "gemma3_text": "gemma3",
}
_PERMUTED = ("llama", "mistral")  # llama.cpp permutes their q/k rows (LlamaModel.permute)
_GEMMA = ("gemma2", "gemma3_text")  # llama.cpp stores their RMSNorm weights as 1 + w
_FILE_TYPES = {"F32": "ALL_F32", "BF16": "MOSTLY_BF16", "Q8_0": "MOSTLY_Q8_0"}  # general.file_type
_CONTROL = 3  # gguf.TokenType.CONTROL
_NORMAL = 1


@dataclass(frozen=True)
class GgufModel:
    """A GGUF file and the checkpoint it was written from (the PyTorch reference)."""

    gguf: Path
    checkpoint: Path


def save_gguf(directory: Path, model_type: str, *, seed: int = 0, quantization: str = "F32") -> GgufModel:
    """A tiny random ``model_type`` model in ``directory``: its checkpoint (``checkpoint/``) and the
    GGUF llama.cpp would write from it (``<model_type>.gguf``; ``quantization``: F32, BF16 or Q8_0)."""
    checkpoint = save_checkpoint(
        directory / "checkpoint", model_type, seed=seed, config=_LLAMA_CPP_HPARAMS.get(model_type, {})
    )
    return GgufModel(write_gguf(checkpoint, directory / f"{model_type}.gguf", quantization=quantization), checkpoint)


# Gemma's attention scale: llama.cpp uses 1/sqrt(head_dim) (its 27B models aside), so the reference
# checkpoint says so too.
_LLAMA_CPP_HPARAMS: dict[str, dict[str, Any]] = {
    "gemma2": {"query_pre_attn_scalar": 16},
    "gemma3_text": {"query_pre_attn_scalar": 16},
}


def write_gguf(checkpoint: Path, target: Path, *, quantization: str = "F32") -> Path:
    """Write the Hugging Face checkpoint in ``checkpoint`` as the GGUF file ``target``."""
    import torch

    gguf = importlib.import_module("gguf")
    transformers = importlib.import_module("transformers")
    config = transformers.AutoConfig.from_pretrained(str(checkpoint))
    model_type = str(config.model_type)
    arch = GGUF_ARCHITECTURES[model_type]
    model = transformers.AutoModelForCausalLM.from_pretrained(str(checkpoint), torch_dtype=torch.float32)
    writer = gguf.GGUFWriter(str(target), arch)
    writer.add_name(checkpoint.name)
    _hparams(writer, config, model_type)
    writer.add_file_type(getattr(gguf.LlamaFileType, _FILE_TYPES[quantization]))
    _tokenizer(writer, checkpoint)
    names = gguf.get_tensor_name_map(_arch_enum(gguf, arch), config.num_hidden_layers)
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight" and config.tie_word_embeddings:
            continue
        base, _, suffix = name.rpartition(".")
        mapped = names.get_name(base)
        if mapped is None:
            raise ValueError(f"no GGUF name for {name}")
        data = tensor.detach().numpy().astype(np.float32)
        data = _as_llama_cpp_stores(model_type, mapped, data, config)
        _add(writer, gguf, f"{mapped}.{suffix}", data, quantization)
    freqs = _llama3_rope_freqs(config)
    if freqs is not None:
        writer.add_tensor("rope_freqs.weight", freqs)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return target


def _arch_enum(gguf: Any, arch: str) -> Any:
    return next(key for key, value in gguf.MODEL_ARCH_NAMES.items() if value == arch)


def _hparams(writer: Any, config: Any, model_type: str) -> None:
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(float(config.rope_theta))
    writer.add_layer_norm_rms_eps(float(config.rms_norm_eps))
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    if model_type in _PERMUTED:
        writer.add_vocab_size(config.vocab_size)
        writer.add_rope_dimension_count(head_dim)
    if model_type == "phi3":
        writer.add_rope_dimension_count(int(head_dim * getattr(config, "partial_rotary_factor", 1.0)))
    if model_type in _GEMMA:
        writer.add_sliding_window(config.sliding_window)
    if model_type == "gemma2":
        writer.add_attn_logit_softcapping(float(config.attn_logit_softcapping))
        writer.add_final_logit_softcapping(float(config.final_logit_softcapping))


def _llama3_rope_freqs(config: Any) -> npt.NDArray[np.float32] | None:
    """llama.cpp's ``rope_freqs`` for Llama 3's RoPE scaling (``LlamaModel.generate_extra_tensors``)."""
    scaling = getattr(config, "rope_scaling", None) or {}
    if scaling.get("rope_type") != "llama3":
        return None
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    old = scaling["original_max_position_embeddings"]
    factors = []
    for freq in 1.0 / (config.rope_theta ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim)):
        wavelength = 2 * np.pi / freq
        if wavelength < old / high:
            factors.append(1.0)
        elif wavelength > old / low:
            factors.append(factor)
        else:
            smooth = (old / wavelength - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(factors, dtype=np.float32)


def _tokenizer(writer: Any, checkpoint: Path) -> None:
    """The checkpoint's byte-level BPE as llama.cpp stores one (``gpt2``), with its special ids and chat template."""
    spec = json.loads((checkpoint / "tokenizer.json").read_text(encoding="utf-8"))
    settings = json.loads((checkpoint / "tokenizer_config.json").read_text(encoding="utf-8"))
    vocab: dict[str, int] = dict(spec["model"]["vocab"])
    special = {token["content"] for token in spec["added_tokens"] if token.get("special")}
    for token in spec["added_tokens"]:
        vocab[token["content"]] = token["id"]
    tokens = sorted(vocab, key=vocab.__getitem__)
    merges = [merge if isinstance(merge, str) else " ".join(merge) for merge in spec["model"]["merges"]]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types([_CONTROL if token in special else _NORMAL for token in tokens])
    writer.add_token_merges(merges)
    writer.add_bos_token_id(vocab[settings["bos_token"]])
    writer.add_eos_token_id(vocab[settings["eos_token"]])
    writer.add_pad_token_id(vocab[settings["pad_token"]])
    writer.add_add_bos_token(True)
    template = checkpoint / "chat_template.jinja"  # where transformers saves it; older ones: tokenizer_config.json
    writer.add_chat_template(template.read_text(encoding="utf-8") if template.is_file() else settings["chat_template"])


def _as_llama_cpp_stores(model_type: str, name: str, data: npt.NDArray[np.float32], config: Any) -> npt.NDArray[Any]:
    if model_type in _PERMUTED and name.endswith(".attn_q"):
        return _permute(data, config.num_attention_heads, config.num_attention_heads)
    if model_type in _PERMUTED and name.endswith(".attn_k"):
        return _permute(data, config.num_attention_heads, config.num_key_value_heads)
    if model_type in _GEMMA and name.endswith("norm"):
        return data + 1.0
    return data


def _permute(weights: npt.NDArray[Any], n_head: int, n_head_kv: int) -> npt.NDArray[Any]:
    """llama.cpp's ``LlamaModel.permute``: each head's rows from halves (HF) to interleaved pairs (GGML rope)."""
    heads = n_head_kv if n_head_kv != n_head else n_head
    shape = weights.shape
    return weights.reshape(heads, 2, shape[0] // heads // 2, *shape[1:]).swapaxes(1, 2).reshape(shape)


def _add(writer: Any, gguf: Any, name: str, data: npt.NDArray[Any], quantization: str) -> None:
    if quantization != "F32" and data.ndim == 2 and data.shape[-1] % 32 == 0:  # llama.cpp keeps norms in F32
        kind = getattr(gguf.GGMLQuantizationType, quantization)
        writer.add_tensor(name, gguf.quants.quantize(data, kind), raw_dtype=kind)
        return
    writer.add_tensor(name, np.ascontiguousarray(data))


def write_raw_gguf(
    target: Path,
    fields: dict[str, Any],
    tensors: dict[str, npt.NDArray[np.float32]] | None = None,
    *,
    version: int = 3,
    magic: bytes = b"GGUF",
) -> Path:
    """A GGUF file written byte by byte (no ``gguf`` package): ``fields`` typed by their Python values
    (str; bool; int: uint32; float: float32; lists of one of them: arrays), ``tensors`` as F32. For the
    files that llama.cpp would never write: another architecture, another version, a wrong magic."""
    tensors = tensors or {}
    out = bytearray(magic + struct.pack("<IQQ", version, len(tensors), len(fields)))
    for key, value in fields.items():
        out += _string(key) + _typed(value)
    offset = 0
    for name, data in tensors.items():
        out += _string(name) + struct.pack("<I", data.ndim) + struct.pack(f"<{data.ndim}Q", *reversed(data.shape))
        out += struct.pack("<IQ", 0, offset)
        offset += -(-data.nbytes // 32) * 32
    out += bytes(-len(out) % 32)
    for data in tensors.values():
        raw = np.ascontiguousarray(data, dtype="<f4").tobytes()
        out += raw + bytes(-len(raw) % 32)
    target.write_bytes(bytes(out))
    return target


def _string(text: str) -> bytes:
    encoded = text.encode("utf-8")
    return struct.pack("<Q", len(encoded)) + encoded


def _typed(value: Any) -> bytes:
    if isinstance(value, list):
        kind = _typed(value[0])[:4] if value else struct.pack("<I", 4)
        return struct.pack("<I", 9) + kind + struct.pack("<Q", len(value)) + b"".join(_typed(v)[4:] for v in value)
    if isinstance(value, str):
        return struct.pack("<I", 8) + _string(value)
    if isinstance(value, bool):
        return struct.pack("<I?", 7, value)
    if isinstance(value, int):
        return struct.pack("<II", 4, value)
    return struct.pack("<If", 6, float(value))
