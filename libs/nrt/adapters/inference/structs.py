"""Public request and response structures of the generation engine."""

from __future__ import annotations

import msgspec

from nrt.core.protocol import FinishReason, ResponseFormat, Timings, TokenLogprob, Tools, Usage

__all__ = ["Chunk", "FinishReason", "GenerationRequest", "Timings", "Usage"]


class GenerationRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One completion request. Give ``prompt`` text, or ``prompt_ids`` already tokenized.

    ``temperature == 0`` is greedy. ``seed`` makes sampling reproducible per request.
    ``max_tokens`` defaults to whatever the context window leaves after the prompt.
    ``session_id`` keeps the KV cache after the reply so the next turn of the same
    conversation prefills only its new tokens. ``prefix_owner`` lets the prompt start from, and add to,
    the KV of prefixes shared with its owner's other prompts (:mod:`nrt.adapters.inference.prefixes`).
    ``ignore_eos`` is for benchmarks.
    ``response_format`` constrains every token to a grammar (a JSON schema): the answer ends when it
    is complete. ``stream=False`` delivers the whole answer as one chunk when it finishes: the caller's
    event loop is woken once per request instead of once per token.
    """

    prompt: str = ""
    prompt_ids: tuple[int, ...] | None = None
    max_tokens: int | None = None
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0  # sample from the k most likely tokens only (0: all)
    seed: int | None = None
    stop: tuple[str, ...] = ()
    session_id: str | None = None
    # whose shared-prefix KV the prompt may start from and adds to (a model id; None: no prefix cache)
    prefix_owner: str | None = None
    ignore_eos: bool = False
    request_id: str = ""
    stream: bool = True
    # False: ``prompt`` holds every special token the model needs (a chat template wrote them), so
    # the tokenizer adds none (no second BOS)
    add_special_tokens: bool = True
    response_format: ResponseFormat | None = None  # constrain the answer to it (None: free text)
    tools: Tools | None = None  # the client's tools: the answer is constrained to calls (or text, under auto)
    answer_lead: str = ""  # the whitespace the template shows before an answer: written before the calls
    # OpenAI's adjustments (nrt.adapters.inference.penalties): over the tokens generated in this request
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, bias)
    logprobs: bool = False  # each token's log-probability on its chunk (nrt.adapters.inference.logprobs)
    top_logprobs: int = 0  # and this many alternatives


class Chunk(msgspec.Struct, frozen=True, kw_only=True):
    """One streamed piece: the text it adds (UTF-8 safe) and the token ids behind it.

    The last chunk of a request has ``finish_reason``, ``usage`` and ``timings`` set.
    """

    text: str
    token_ids: tuple[int, ...]
    finish_reason: FinishReason | None = None
    usage: Usage | None = None
    timings: Timings | None = None
    stop_sequence: str | None = None  # the stop sequence that ended the answer (finish_reason "stop"), if one did
    logprobs: tuple[TokenLogprob, ...] = ()  # when asked for: one per token of the text (not the end-of-sequence one)
