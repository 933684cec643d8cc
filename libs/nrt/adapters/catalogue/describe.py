"""Turn an exported ONNX graph plus a few facts about the model into an :class:`ArtifactRecord`.

The graph is the ground truth for dimensions and tensor names; builders (and the local
directory importer) supply what the graph cannot tell: token ids, context length,
provenance. A graph that does not have the expected shape is an :class:`ArtifactError`.
"""

from __future__ import annotations

from nrt.adapters.catalogue.record import ArtifactRecord, Pooling, Quantization
from nrt.adapters.catalogue.signature import GraphSignature
from nrt.adapters.inference.artifact import numpy_dtype, static_dim
from nrt.adapters.inference.errors import ArtifactError


def causal_lm_record(
    signature: GraphSignature,
    *,
    name: str,
    source: str,
    recipe: str,
    context_length: int,
    bos_token_id: int | None,
    eos_token_ids: tuple[int, ...],
    pad_token_id: int | None,
    quantization: Quantization,
    tokenizer_adds_special_tokens: bool,
    vocab_size: int | None = None,
    quantization_detail: str | None = None,
) -> ArtifactRecord:
    """Describe a ``text-generation-with-past`` graph (optimum layout)."""
    past = signature.past_inputs
    present = signature.present_outputs
    if signature.input("input_ids") is None or signature.output("logits") is None:
        raise ArtifactError("the ONNX graph has no input_ids input or no logits output")
    if not past or len(past) != len(present) or len(past) % 2:
        raise ArtifactError(
            "the ONNX graph has no matching past_key_values.{i}.key/value inputs and present.{i}.key/value "
            "outputs: export it with optimum task text-generation-with-past"
        )
    if signature.input("attention_mask") is None:
        raise ArtifactError("the ONNX graph has no attention_mask input")
    first = signature.input(past[0])
    assert first is not None
    if len(first.shape) != 4:
        raise ArtifactError(f"{first.name} has shape {first.shape}; expected [batch, kv_heads, past_length, head_dim]")
    num_kv_heads = static_dim(first.shape[1])
    head_dim = static_dim(first.shape[3])
    kv_dtype = numpy_dtype(first.type)
    logits = signature.output("logits")
    assert logits is not None
    graph_vocab = static_dim(logits.shape[-1]) if logits.shape else None
    vocab = graph_vocab or vocab_size
    if num_kv_heads is None or head_dim is None or kv_dtype is None or vocab is None:
        raise ArtifactError(
            f"cannot read num_kv_heads / head_dim / key-value dtype / vocab size from the graph "
            f"({first.name}: {first.shape} {first.type}; logits: {logits.shape})"
        )
    if not eos_token_ids:
        raise ArtifactError("the model declares no end-of-sequence token id")
    return ArtifactRecord(
        name=name,
        kind="causal-lm",
        source=source,
        recipe=recipe,
        context_length=context_length,
        tokenizer_adds_special_tokens=tokenizer_adds_special_tokens,
        onnx_inputs=signature.input_names,
        onnx_outputs=signature.output_names,
        num_layers=len(past) // 2,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        vocab_size=vocab,
        bos_token_id=bos_token_id,
        eos_token_ids=eos_token_ids,
        pad_token_id=pad_token_id,
        quantization=quantization,
        quantization_detail=quantization_detail,
        past_inputs=past,
        present_outputs=present,
        kv_dtype=kv_dtype,
        logits_output="logits",
        position_ids_input="position_ids" if signature.input("position_ids") is not None else None,
    )


def encoder_record(
    signature: GraphSignature,
    *,
    name: str,
    source: str,
    recipe: str,
    context_length: int,
    pooling: Pooling,
    normalize: bool,
    tokenizer_adds_special_tokens: bool,
    pad_token_id: int | None,
    hidden_size: int | None = None,
) -> ArtifactRecord:
    """Describe a ``feature-extraction`` graph whose output is ``last_hidden_state``."""
    if signature.input("input_ids") is None or signature.input("attention_mask") is None:
        raise ArtifactError("the encoder graph needs input_ids and attention_mask inputs")
    hidden = signature.output("last_hidden_state")
    if hidden is None:
        raise ArtifactError("the encoder graph has no last_hidden_state output: export it with task feature-extraction")
    size = (static_dim(hidden.shape[-1]) if hidden.shape else None) or hidden_size
    if size is None:
        raise ArtifactError(f"cannot read the hidden size from last_hidden_state {hidden.shape}")
    return ArtifactRecord(
        name=name,
        kind="encoder",
        source=source,
        recipe=recipe,
        context_length=context_length,
        tokenizer_adds_special_tokens=tokenizer_adds_special_tokens,
        onnx_inputs=signature.input_names,
        onnx_outputs=signature.output_names,
        pad_token_id=pad_token_id,
        hidden_size=size,
        pooling=pooling,
        normalize=normalize,
        hidden_state_output=hidden.name,
    )
