"""Real Hugging Face checkpoints for tests: tiny random models of each supported architecture, saved
with ``save_pretrained`` and placed in a Hugging Face cache layout, so ``hf://`` sources resolve
through the real ``huggingface_hub`` code with ``HF_HUB_OFFLINE=1`` (the Hub is not reachable here).

A checkpoint holds ``config.json``, ``model.safetensors``, ``generation_config.json`` and a fast
tokenizer (``tokenizer.json``, ``tokenizer_config.json`` with a chat template). The cache layout is
``huggingface_hub``'s: ``models--<org>--<name>/snapshots/<commit>/`` and ``refs/<revision>``.
"""

from __future__ import annotations

import hashlib
import importlib
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from nrt.testing.tiny_models import build_tokenizer

# A ChatML template with a system prompt, as many instruction-tuned checkpoints carry one.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_COMMON: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "max_position_embeddings": 256,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
}


class ModelFactory(Protocol):
    """A random model of one architecture: its vocabulary size, and what its config changes from the tiny one."""

    def __call__(self, vocab: int, **overrides: Any) -> Any: ...


def _decoder(config_class: str, model_class: str, **extra: Any) -> ModelFactory:
    def make(vocab: int, **overrides: Any) -> Any:
        transformers = _transformers()
        config = getattr(transformers, config_class)(vocab_size=vocab, **{**_COMMON, **extra, **overrides})
        return getattr(transformers, model_class)(config).eval()

    return make


def _transformers() -> Any:
    """transformers, untyped (its own annotations are partial)."""
    return importlib.import_module("transformers")


def _bert(vocab: int, **overrides: Any) -> Any:
    transformers = _transformers()
    settings: dict[str, Any] = {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "max_position_embeddings": 256,
        "pad_token_id": 0,
    }
    config = transformers.BertConfig(vocab_size=vocab, **{**settings, **overrides})
    return transformers.BertModel(config).eval()


# model_type -> a tiny random model of it (the vocabulary size given; config overrides make it bigger)
ARCHITECTURES: dict[str, ModelFactory] = {
    "llama": _decoder("LlamaConfig", "LlamaForCausalLM", num_key_value_heads=2),
    "mistral": _decoder("MistralConfig", "MistralForCausalLM", num_key_value_heads=2, sliding_window=None),
    "qwen2": _decoder("Qwen2Config", "Qwen2ForCausalLM", num_key_value_heads=2),
    "qwen3": _decoder("Qwen3Config", "Qwen3ForCausalLM", num_key_value_heads=2, head_dim=16),
    "phi3": _decoder("Phi3Config", "Phi3ForCausalLM", num_key_value_heads=2),
    "gemma2": _decoder("Gemma2Config", "Gemma2ForCausalLM", num_key_value_heads=1, head_dim=16),
    "gemma3_text": _decoder(
        "Gemma3TextConfig", "Gemma3ForCausalLM", num_key_value_heads=1, head_dim=16, sliding_window=16
    ),
    "granite": _decoder("GraniteConfig", "GraniteForCausalLM", num_key_value_heads=2),
    "bert": _bert,
}


def save_checkpoint(
    directory: Path, model_type: str, *, seed: int = 0, config: Mapping[str, Any] | None = None
) -> Path:
    """A tiny random ``model_type`` checkpoint in ``directory``, as ``save_pretrained`` writes one;
    ``config``: what its config changes (sizes: ``hidden_size``, ``num_hidden_layers``, ...)."""
    import torch

    transformers = _transformers()
    directory.mkdir(parents=True, exist_ok=True)
    vocab = build_tokenizer(directory)
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(directory / "tokenizer.json"),
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        chat_template=CHAT_TEMPLATE,
    )
    torch.manual_seed(seed)
    model = ARCHITECTURES[model_type](vocab, **(config or {}))
    model.save_pretrained(directory, safe_serialization=True)
    tokenizer.save_pretrained(directory)
    return directory


def put_in_cache(cache: Path, repo: str, checkpoint: Path, *, revision: str = "main") -> str:
    """Place ``checkpoint`` in the Hugging Face cache at ``cache`` as ``repo`` at ``revision``; its commit."""
    digest = hashlib.sha1(usedforsecurity=False)
    for path in sorted(p for p in checkpoint.iterdir() if p.is_file()):
        digest.update(path.name.encode() + path.read_bytes())
    commit = digest.hexdigest()
    repo_dir = cache / ("models--" + repo.replace("/", "--"))
    snapshot = repo_dir / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    for path in checkpoint.iterdir():
        if path.is_file():
            shutil.copyfile(path, snapshot / path.name)
    (repo_dir / "refs").mkdir(exist_ok=True)
    (repo_dir / "refs" / revision).write_text(commit)
    return commit
