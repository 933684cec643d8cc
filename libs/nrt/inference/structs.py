"""Public request and response structures of the generation engine."""

from __future__ import annotations

from typing import Literal

import msgspec

FinishReason = Literal["stop", "length"]


class GenerationRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One completion request. Give ``prompt`` text, or ``prompt_ids`` already tokenized.

    ``temperature == 0`` is greedy. ``seed`` makes sampling reproducible per request.
    ``max_tokens`` defaults to whatever the context window leaves after the prompt.
    ``session_id`` keeps the KV cache after the reply so the next turn of the same
    conversation prefills only its new tokens. ``ignore_eos`` is for benchmarks.
    ``stream=False`` delivers the whole answer as one chunk when it finishes: the caller's
    event loop is woken once per request instead of once per token.
    """

    prompt: str = ""
    prompt_ids: tuple[int, ...] | None = None
    max_tokens: int | None = None
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    session_id: str | None = None
    ignore_eos: bool = False
    request_id: str = ""
    stream: bool = True


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cached_tokens: int  # prompt tokens served from the session's KV cache, not prefilled


class Timings(msgspec.Struct, frozen=True, kw_only=True):
    queue_ms: float  # submitted -> prefill started
    prefill_ms: float  # the prefill ONNX runs
    ttft_ms: float  # submitted -> first token chosen
    decode_ms: float  # first token -> last token
    decode_tokens_per_s: float  # (completion_tokens - 1) / decode time
    total_ms: float
    prefilled_tokens: int  # prompt tokens actually run through the model
    batch_size_max: int  # the largest batch this request decoded in


class Chunk(msgspec.Struct, frozen=True, kw_only=True):
    """One streamed piece: the text it adds (UTF-8 safe) and the token ids behind it.

    The last chunk of a request has ``finish_reason``, ``usage`` and ``timings`` set.
    """

    text: str
    token_ids: tuple[int, ...]
    finish_reason: FinishReason | None = None
    usage: Usage | None = None
    timings: Timings | None = None
