"""``tiny-llama``: a tiny random Llama, seeded, exported with past key values in seconds.

It is the fixture for fast tests of the real inference path: a genuine ONNX decoder graph
(2 layers, hidden 64, grouped-query attention) with a genuine byte-level BPE tokenizer, so
every code path a real model takes is exercised. Its text is gibberish by design.
"""

from __future__ import annotations

import json

import numpy as np

from nrt.catalogue.builders.export import export_causal_lm, move_export, offline, quiet, untyped
from nrt.catalogue.byte_tokenizer import SPECIAL_TOKENS, byte_level_tokenizer
from nrt.catalogue.describe import causal_lm_record
from nrt.catalogue.entry import BuildContext
from nrt.catalogue.record import ArtifactRecord
from nrt.catalogue.signature import read_signature
from nrt.inference.artifact import MODEL_FILE, TOKENIZER_FILE
from nrt.inference.errors import ArtifactError

NAME = "tiny-llama"
RECIPE = f"{NAME}/1"
SEED = 1234
CONTEXT_LENGTH = 512
STEPS = (
    "Build byte-level tokenizer",
    "Create seeded random Llama",
    "Export ONNX with past key values",
    "Check against torch",
)

PAD_ID, BOS_ID, EOS_ID = (SPECIAL_TOKENS.index(token) for token in ("<pad>", "<bos>", "<eos>"))


def build(context: BuildContext) -> ArtifactRecord:
    context.progress.step(STEPS[0])
    tokenizer = byte_level_tokenizer()
    tokenizer.save(str(context.staging / TOKENIZER_FILE))

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
    move_export(export, context.staging)

    context.progress.step(STEPS[3])
    prompt = tokenizer.encode("Hello, tiny llama!").ids
    with torch.no_grad():
        expected = model(torch.tensor([prompt])).logits[0].numpy()
    record = causal_lm_record(
        read_signature(context.staging / MODEL_FILE),
        name=NAME,
        source=f"generated:random-llama(seed={SEED},layers=2,hidden=64,heads=4,kv_heads=2)",
        recipe=RECIPE,
        context_length=CONTEXT_LENGTH,
        bos_token_id=BOS_ID,
        eos_token_ids=(EOS_ID,),
        pad_token_id=PAD_ID,
        quantization="fp32",
        tokenizer_adds_special_tokens=True,
    )
    _check_against(context, record, prompt, expected)
    return record


def _check_against(context: BuildContext, record: ArtifactRecord, prompt: list[int], expected: np.ndarray) -> None:
    from nrt.catalogue.greedy import empty_past, forward, open_session

    session = open_session(context.staging, record)
    logits, _ = forward(session, record, np.array([prompt], dtype=np.int64), empty_past(record))
    if not np.allclose(logits[0], expected, atol=1e-4, rtol=1e-3):
        worst = float(np.abs(logits[0] - expected).max())
        raise ArtifactError(f"the exported tiny-llama disagrees with torch (max |diff| {worst:.2e})")
    config = json.loads((context.staging / "config.json").read_text())
    if config.get("model_type") != "llama":
        raise ArtifactError("the exported config.json is not a llama config")
