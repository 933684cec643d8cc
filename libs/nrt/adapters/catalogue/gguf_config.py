"""A GGUF file's hyper-parameters as a Hugging Face ``config.json``: what llama.cpp's converter wrote, read back.

The architectures are those both transformers' GGUF loader and NRT's exporter know (llama.cpp's
name -> ``model_type``; Mistral is a ``llama`` in llama.cpp's files, and is served as one). The
keys are llama.cpp's (``<arch>.context_length``...), read as transformers' GGUF loader reads
them, plus what it leaves out and llama.cpp implies: each head's size (``attention.key_length``),
Gemma's attention scale (llama.cpp's: 1/sqrt(head size), but for its 27B models), Gemma 2's
logit soft-capping, Phi-3's partial rotary embedding, linear and YaRN RoPE scaling, and Llama 3's
RoPE frequency factors (a ``rope_freqs`` tensor, matched to ``rope_type: llama3``). What cannot be
carried over exactly is an :class:`ArtifactError` naming it, never a silently different model.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from nrt.adapters.catalogue.gguf_header import GgufHeader, tensor_data
from nrt.adapters.inference.errors import ArtifactError

# llama.cpp's architecture name -> the transformers model_type it becomes
ARCHITECTURES = {
    "llama": "llama",
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "phi3": "phi3",
    "gemma2": "gemma2",
    "gemma3": "gemma3_text",
}
# the tensors that carry hyper-parameters, not weights (read here, not loaded into the model)
ROPE_FREQS = "rope_freqs.weight"
# <arch>.<key> -> config.json key, for every architecture above
_KEYS = {
    "context_length": "max_position_embeddings",
    "embedding_length": "hidden_size",
    "block_count": "num_hidden_layers",
    "feed_forward_length": "intermediate_size",
    "attention.head_count": "num_attention_heads",
    "attention.head_count_kv": "num_key_value_heads",
    "attention.layer_norm_rms_epsilon": "rms_norm_eps",
    "attention.key_length": "head_dim",
    "rope.freq_base": "rope_theta",
    "attention.sliding_window": "sliding_window",
    "attn_logit_softcapping": "attn_logit_softcapping",
    "final_logit_softcapping": "final_logit_softcapping",
    "vocab_size": "vocab_size",
}
_TOKEN_IDS = {"bos_token_id": "bos_token_id", "eos_token_id": "eos_token_id", "padding_token_id": "pad_token_id"}
_GEMMA_27B_LAYERS = {"gemma2": 46, "gemma3": 62}  # llama.cpp scales their attention by hidden/heads
# Llama 3.1's RoPE frequency bands, as its config.json states them (llama.cpp keeps only the factors)
_LLAMA3_BANDS = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


def supported_architectures() -> str:
    return ", ".join(ARCHITECTURES)


def hf_config(header: GgufHeader) -> dict[str, Any]:
    """The ``config.json`` of the model in ``header`` (``model_type`` first), for ``AutoConfig.for_model``."""
    arch = header.architecture
    if arch not in ARCHITECTURES:
        raise ArtifactError(f"{header.path}: GGUF architecture {arch!r} is not supported ({supported_architectures()})")
    config: dict[str, Any] = {"model_type": ARCHITECTURES[arch]}
    for key, name in _KEYS.items():
        value = header.arch_field(key)
        if value is not None:
            config[name] = _scalar(header, key, value)
    for key, name in _TOKEN_IDS.items():
        value = header.fields.get(f"tokenizer.ggml.{key}")
        if value is not None:
            config[name] = int(value)
    if "vocab_size" not in config:
        config["vocab_size"] = len(header.fields.get("tokenizer.ggml.tokens") or [])
    config["tie_word_embeddings"] = not any(tensor.name == "output.weight" for tensor in header.tensors)
    head_dim = int(config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"])
    if arch in _GEMMA_27B_LAYERS:
        big = config["num_hidden_layers"] == _GEMMA_27B_LAYERS[arch]
        config["query_pre_attn_scalar"] = config["hidden_size"] // config["num_attention_heads"] if big else head_dim
    rotary = header.arch_field("rope.dimension_count")
    if arch == "phi3" and rotary is not None and int(rotary) != head_dim:
        config["partial_rotary_factor"] = int(rotary) / head_dim
    elif rotary is not None and int(rotary) != head_dim:
        raise ArtifactError(f"{header.path}: a rotary embedding over {rotary} of each head's {head_dim} dimensions")
    scaling = _rope_scaling(header, head_dim, float(config.get("rope_theta", 10000.0)))
    if scaling is not None:
        config["rope_scaling"] = scaling
    return config


def _scalar(header: GgufHeader, key: str, value: Any) -> Any:
    if isinstance(value, list):  # per-layer values (another architecture's files): not a config.json value
        raise ArtifactError(f"{header.path}: {header.architecture}.{key} varies per layer, which is not supported")
    return value


def _rope_scaling(header: GgufHeader, head_dim: int, theta: float) -> dict[str, Any] | None:
    kind = str(header.arch_field("rope.scaling.type") or "none")
    factor = header.arch_field("rope.scaling.factor")
    freqs = next((tensor for tensor in header.tensors if tensor.name == ROPE_FREQS), None)
    if freqs is not None:
        if header.architecture != "llama" or kind not in ("none", "llama3"):
            raise ArtifactError(f"{header.path}: RoPE frequency factors with {kind} scaling are not supported")
        return _llama3(header, tensor_data(header.path, freqs), head_dim, theta)
    if kind == "none" or (kind == "linear" and factor in (None, 1.0)):
        return None
    if kind == "linear":
        return {"rope_type": "linear", "factor": float(factor)}
    if kind == "yarn" and factor is not None:
        original = header.arch_field("rope.scaling.original_context_length")
        scaling: dict[str, Any] = {"rope_type": "yarn", "factor": float(factor)}
        if original is not None:
            scaling["original_max_position_embeddings"] = int(original)
        return scaling
    raise ArtifactError(f"{header.path}: RoPE scaling {kind!r} is not supported (linear and yarn are)")


def _llama3(header: GgufHeader, freqs: npt.NDArray[Any], head_dim: int, theta: float) -> dict[str, Any]:
    """Llama 3.1's ``rope_scaling`` whose frequency factors are the file's ``rope_freqs``."""
    factors = np.asarray(freqs, dtype=np.float64).reshape(-1)
    scaling = {"rope_type": "llama3", "factor": float(factors.max()), **_LLAMA3_BANDS}
    if factors.size != head_dim // 2 or not np.allclose(llama3_factors(scaling, head_dim, theta), factors, rtol=1e-4):
        raise ArtifactError(
            f"{header.path}: its RoPE frequency factors ({ROPE_FREQS}) are not Llama 3's "
            f"(factor {scaling['factor']}, frequency bands {_LLAMA3_BANDS})"
        )
    return scaling


def llama3_factors(scaling: dict[str, Any], head_dim: int, theta: float) -> npt.NDArray[np.float64]:
    """What each rotary frequency is divided by under Llama 3's ``rope_scaling`` (llama.cpp's ``rope_freqs``)."""
    factor, low, high = float(scaling["factor"]), float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
    context = float(scaling["original_max_position_embeddings"])
    inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    wavelength = 2 * math.pi / inv_freq
    smooth = (context / wavelength - low) / (high - low)
    medium = 1.0 / ((1 - smooth) / factor + smooth)
    return np.where(wavelength < context / high, 1.0, np.where(wavelength > context / low, factor, medium))
