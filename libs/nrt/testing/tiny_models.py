"""Build tiny, seeded ONNX models for the inference tests (export-time deps: torch, transformers, optimum).

These helpers are test/benchmark tooling only; the runtime under ``libs/nrt/adapters/inference`` never
imports torch, transformers or optimum.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

CORPUS = [
    "The quick brown fox jumps over the lazy dog. ",
    "Hello world! Bonjour le monde, ça va? Très bien, merci. ",
    "日本語のテキストです。絵文字も 🎉🚀 使えます。 ",
    "User: what is the capital of France?\nAssistant: Paris.\n",
    "System: you are a helpful assistant.\nUser: hi\nAssistant: hello there\n",
    "Q: 2+2?\nA: 4\n\nQ: colour of the sky?\nA: blue\n\n",
]


def build_tokenizer(out_dir: Path, vocab_size: int = 384) -> int:
    """Train a byte-level BPE with llama-style specials (<pad>=0, <s>=1, </s>=2); returns its size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<pad>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 40, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", 1)])
    tok.save(str(out_dir / "tokenizer.json"))
    return int(tok.get_vocab_size())


def build_tiny_llama(out_dir: Path, *, seed: int = 0, context_length: int = 256) -> Path:
    """A 2-layer, hidden-64 random Llama exported as one ONNX file with past key values."""
    import torch
    from optimum.exporters.onnx import main_export
    from transformers import LlamaConfig, LlamaForCausalLM

    out_dir.mkdir(parents=True, exist_ok=True)
    hf_dir = out_dir / "_hf"
    hf_dir.mkdir(exist_ok=True)
    vocab = build_tokenizer(hf_dir)
    torch.manual_seed(seed)
    config = LlamaConfig(  # type: ignore[no-untyped-call]
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=context_length,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    model = LlamaForCausalLM(config).eval()  # type: ignore[no-untyped-call]
    # Sharpen the random output head so greedy decoding has clear winners (fewer near-ties).
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
        # Make EOS rare so generations run until max_tokens unless a test wants otherwise.
        model.lm_head.weight[2].mul_(0.0)
    model.save_pretrained(hf_dir)
    main_export(str(hf_dir), output=str(out_dir), task="text-generation-with-past", opset=18)
    (out_dir / "tokenizer.json").write_bytes((hf_dir / "tokenizer.json").read_bytes())
    record = {
        "name": "tiny-llama-test",
        "kind": "causal-lm",
        "context_length": context_length,
        "num_layers": 2,
        "num_kv_heads": 2,
        "head_dim": 16,
        "vocab_size": vocab,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
    }
    (out_dir / "nrt-artifact.json").write_text(json.dumps(record, indent=2))
    return out_dir


def build_tiny_bert(out_dir: Path, *, seed: int = 0) -> Path:
    """A 2-layer random BERT exported for feature extraction (last_hidden_state)."""
    import torch
    from optimum.exporters.onnx import main_export
    from transformers import BertConfig, BertModel

    out_dir.mkdir(parents=True, exist_ok=True)
    hf_dir = out_dir / "_hf"
    hf_dir.mkdir(exist_ok=True)
    vocab = build_tokenizer(hf_dir)
    torch.manual_seed(seed)
    config = BertConfig(  # type: ignore[no-untyped-call]
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=128,
        pad_token_id=0,
    )
    BertModel(config).eval().save_pretrained(hf_dir)  # type: ignore[no-untyped-call]
    main_export(str(hf_dir), output=str(out_dir), task="feature-extraction", opset=18)
    (out_dir / "tokenizer.json").write_bytes((hf_dir / "tokenizer.json").read_bytes())
    record = {"name": "tiny-bert-test", "kind": "encoder", "context_length": 128, "pad_token_id": 0}
    (out_dir / "nrt-artifact.json").write_text(json.dumps(record, indent=2))
    return out_dir


def gemma3_onnx_config(config_dir: Path, *, position_ids: bool) -> object:
    """optimum's Gemma 3 text ONNX config, optionally with an explicit ``position_ids`` input.

    optimum-onnx 0.1.0 exports Gemma 3 WITHOUT ``position_ids``: the graph then derives
    positions from the cache length, so rows of different lengths cannot share a
    left-padded batch. Adding the input (Gemma3ForCausalLM.forward accepts it) fixes that.
    """
    from optimum.exporters.onnx.model_configs import Gemma3TextOnnxConfig
    from transformers import AutoConfig

    class Gemma3TextWithPositionIds(Gemma3TextOnnxConfig):  # type: ignore[misc]
        @property
        def inputs(self) -> dict[str, dict[int, str]]:
            common: dict[str, dict[int, str]] = super().inputs
            common["position_ids"] = {0: "batch_size", 1: "sequence_length"}
            return common

    cls = Gemma3TextWithPositionIds if position_ids else Gemma3TextOnnxConfig
    return cls(AutoConfig.from_pretrained(config_dir), task="text-generation", use_past=True, use_past_in_inputs=True)


def build_tiny_gemma3(out_dir: Path, *, position_ids: bool = True, seed: int = 0) -> Path:
    """A 4-layer random Gemma 3 (sliding-window layers, one KV head), exported like the catalogue's."""
    import torch
    from optimum.exporters.onnx import main_export
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    out_dir.mkdir(parents=True, exist_ok=True)
    hf_dir = out_dir / "_hf"
    hf_dir.mkdir(exist_ok=True)
    vocab = build_tokenizer(hf_dir)
    torch.manual_seed(seed)
    config = Gemma3TextConfig(  # type: ignore[no-untyped-call]
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=256,
        sliding_window=16,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    model = Gemma3ForCausalLM(config).eval()  # type: ignore[no-untyped-call]
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    model.save_pretrained(hf_dir)
    onnx_config = gemma3_onnx_config(hf_dir, position_ids=position_ids)
    main_export(
        str(hf_dir),
        output=str(out_dir),
        task="text-generation-with-past",
        opset=18,
        custom_onnx_configs={"model": onnx_config},
    )
    (out_dir / "tokenizer.json").write_bytes((hf_dir / "tokenizer.json").read_bytes())
    record = {
        "name": "tiny-gemma3-test",
        "kind": "causal-lm",
        "context_length": 256,
        "bos_token_id": 1,
        "eos_token_ids": [2],
        "pad_token_id": 0,
        "tokenizer_adds_special_tokens": True,
    }
    (out_dir / "nrt-artifact.json").write_text(json.dumps(record, indent=2))
    return out_dir


def cached_build(root: Path, name: str, build: Callable[[Path], Path]) -> Path:
    """``root/name`` built by ``build`` once: staged beside it and renamed, so a crash leaves no half model."""
    import shutil

    target = root / name
    if not (target / "model.onnx").is_file():
        staging = root / f".{name}.building"
        shutil.rmtree(staging, ignore_errors=True)
        build(staging)
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    return target
