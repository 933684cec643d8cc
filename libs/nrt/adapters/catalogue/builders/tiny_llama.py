"""``tiny-llama``: a tiny random Llama, seeded, exported with past key values in seconds.

It is the fixture for fast tests of the real inference path: a genuine ONNX decoder graph
(2 layers, hidden 64, grouped-query attention) with a genuine byte-level BPE tokenizer, so
every code path a real model takes is exercised. Its text is gibberish by design. The root
variant is the fp32 export; the ``cuda`` variant is the same export with float16 weight matrices.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import msgspec
import numpy as np

from nrt.adapters.catalogue.builders import fp16
from nrt.adapters.catalogue.builders.export import export_causal_lm, offline, quiet, untyped
from nrt.adapters.catalogue.builders.fp16 import check_logits, write_cuda_variant
from nrt.adapters.catalogue.builders.logits import add_logits_to_keep
from nrt.adapters.catalogue.byte_tokenizer import SPECIAL_TOKENS, byte_level_tokenizer
from nrt.adapters.catalogue.describe import causal_lm_record
from nrt.adapters.catalogue.entry import BuildContext
from nrt.adapters.catalogue.record import ArtifactRecord, Provider, Quantization
from nrt.adapters.catalogue.signature import read_signature
from nrt.adapters.inference.artifact import CONFIG_FILE, MODEL_FILE, TOKENIZER_FILE
from nrt.adapters.inference.errors import ArtifactError

NAME = "tiny-llama"
RECIPE = f"{NAME}/2"  # 2: logits_to_keep
CUDA_RECIPE = f"{RECIPE}+fp16/1"
SEED = 1234
CONTEXT_LENGTH = 512
SOURCE = f"generated:random-llama(seed={SEED},layers=2,hidden=64,heads=4,kv_heads=2)"
STEPS = (
    "Build byte-level tokenizer",
    "Create seeded random Llama",
    "Export ONNX with past key values",
)
CPU_STEPS = ("Check against torch",)
CUDA_STEPS = ("Convert to float16 weights (CUDA variant)", "Check float16 against torch")
PROMPT = "Hello, tiny llama!"

PAD_ID, BOS_ID, EOS_ID = (SPECIAL_TOKENS.index(token) for token in ("<pad>", "<bos>", "<eos>"))


def build(context: BuildContext) -> tuple[ArtifactRecord, ...]:
    context.progress.step(STEPS[0])
    tokenizer = byte_level_tokenizer()
    tokenizer.save(str(context.work / TOKENIZER_FILE))

    context.progress.step(STEPS[1])
    offline()
    import torch

    transformers = untyped("transformers")
    config = transformers.LlamaConfig(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=CONTEXT_LENGTH,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=PAD_ID,
        tie_word_embeddings=False,
        initializer_range=0.2,  # peaky logits: greedy output depends visibly on the context
        rope_theta=10000.0,
    )
    with quiet():
        torch.manual_seed(SEED)
        model = transformers.LlamaForCausalLM(config).eval()

    context.progress.step(STEPS[2])
    export = export_causal_lm(model, context.work)
    shutil.move(context.work / TOKENIZER_FILE, export / TOKENIZER_FILE)
    prompt = tokenizer.encode(PROMPT).ids
    with torch.no_grad():
        expected = model(torch.tensor([prompt])).logits[0].numpy()

    records: list[ArtifactRecord] = []
    if "cpu" in context.providers:
        target = context.directory("cpu")
        for name in (MODEL_FILE, TOKENIZER_FILE, CONFIG_FILE):
            shutil.copyfile(export / name, target / name)
        add_logits_to_keep(target / MODEL_FILE)
        context.progress.step(CPU_STEPS[0])
        record = _record(target, provider="cpu", recipe=RECIPE, quantization="fp32")
        _check_against(target, record, prompt, expected)
        records.append(record)
    if "cuda" in context.providers:
        context.progress.step(CUDA_STEPS[0])
        target = context.directory("cuda")
        write_cuda_variant(export, target)
        context.progress.step(CUDA_STEPS[1])
        record = _record(target, provider="cuda", recipe=CUDA_RECIPE, quantization="fp16", detail=fp16.DETAIL)
        check_logits(expected, _logits(target, record, prompt), "tiny-llama")
        records.append(record)
    return tuple(records)


def _record(
    directory: Path, *, provider: Provider, recipe: str, quantization: Quantization, detail: str | None = None
) -> ArtifactRecord:
    record = causal_lm_record(
        read_signature(directory / MODEL_FILE),
        name=NAME,
        source=SOURCE,
        recipe=recipe,
        context_length=CONTEXT_LENGTH,
        bos_token_id=BOS_ID,
        eos_token_ids=(EOS_ID,),
        pad_token_id=PAD_ID,
        quantization=quantization,
        quantization_detail=detail,
        tokenizer_adds_special_tokens=True,
    )
    return msgspec.structs.replace(record, provider=provider)


def _logits(directory: Path, record: ArtifactRecord, prompt: list[int]) -> np.ndarray:
    from nrt.adapters.catalogue.greedy import empty_past, forward, open_session

    session = open_session(directory, record)
    logits, _ = forward(session, record, np.array([prompt], dtype=np.int64), empty_past(record))
    first: np.ndarray = logits[0]
    return first


def _check_against(directory: Path, record: ArtifactRecord, prompt: list[int], expected: np.ndarray) -> None:
    logits = _logits(directory, record, prompt)
    if not np.allclose(logits, expected, atol=1e-4, rtol=1e-3):
        worst = float(np.abs(logits - expected).max())
        raise ArtifactError(f"the exported tiny-llama disagrees with torch (max |diff| {worst:.2e})")
    config = json.loads((directory / CONFIG_FILE).read_text())
    if config.get("model_type") != "llama":
        raise ArtifactError("the exported config.json is not a llama config")
