"""Request validation for ``/v1/embeddings`` and ``/v1/completions``: a request in, a call or a clear
ApiError (400 naming the field) out; and the base64 form of an embedding. Pure."""

from __future__ import annotations

import base64
import struct
from collections.abc import Sequence
from typing import Any

import msgspec

from api_gateway.endpoint_types import CompletionRequest, EmbeddingRequest
from api_gateway.errors import ApiError
from api_gateway.validate import MAX_STOP, ChatCall, check_max_tokens
from nrt.core.protocol import SamplingParams

MAX_INPUTS = 2048  # texts in one embeddings request (OpenAI's limit)
MAX_PROMPTS = 16  # prompts in one completions request (each is one generation)


class EmbedCall(msgspec.Struct, frozen=True, kw_only=True):
    """A valid embeddings request."""

    model: str
    texts: tuple[str, ...]
    base64: bool
    dimensions: int | None


def _texts(value: str | list[Any], param: str, limit: int) -> tuple[str, ...]:
    """``value`` as strings: one string or a list of 1 to ``limit`` non-empty strings; token ids are a 400."""
    items = [value] if isinstance(value, str) else value
    if not items:
        raise ApiError(400, f"'{param}' must not be an empty list", code="invalid_value", param=param)
    if len(items) > limit:
        raise ApiError(
            400, f"'{param}' holds {len(items)} items; the limit is {limit}", code="invalid_value", param=param
        )
    for i, item in enumerate(items):
        where = param if isinstance(value, str) else f"{param}[{i}]"
        if isinstance(item, int | list):
            raise ApiError(
                400,
                f"'{param}' as token ids is not supported: token ids differ between models; send text",
                code="unsupported_value",
                param=param,
            )
        if not isinstance(item, str):
            raise ApiError(
                400, f"'{where}' must be a string, got {type(item).__name__}", code="invalid_value", param=where
            )
        if not item:
            raise ApiError(400, f"'{where}' must not be empty", code="invalid_value", param=where)
    return tuple(items)


def _refuse(param: str, why: str) -> ApiError:
    return ApiError(
        400,
        f"'{param}' is not supported: {why}; send the request without it",
        code="unsupported_parameter",
        param=param,
    )


def validate_embeddings(request: EmbeddingRequest) -> EmbedCall:
    if not request.model:
        raise ApiError(400, "'model' must name a model (see GET /v1/models)", code="invalid_value", param="model")
    if request.user is not None:
        raise _refuse("user", "an embedding has no conversation, and NRT keeps no per-user record of it")
    return EmbedCall(
        model=request.model,
        texts=_texts(request.input, "input", MAX_INPUTS),
        base64=request.encoding_format == "base64",
        dimensions=request.dimensions,
    )


def encode_vector(vector: Sequence[float], as_base64: bool) -> list[float] | str:
    """An embedding as the client asked: floats, or base64 of little-endian float32 (what OpenAI sends)."""
    if not as_base64:
        return list(vector)
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


_NEUTRAL: dict[str, tuple[object, ...]] = {
    "echo": (None, False),
    "suffix": (None, ""),
    "best_of": (None, 1),
    "logprobs": (None,),
    "presence_penalty": (None, 0, 0.0),
    "frequency_penalty": (None, 0, 0.0),
    "logit_bias": (None, {}),
    "user": (None,),
}
_WHY = {
    "echo": "the answer does not repeat the prompt",
    "suffix": "no model here fills in the middle",
    "best_of": "one completion is generated per prompt",
    "logprobs": "completions do not return log-probabilities",
    "presence_penalty": "the sampler applies no penalty on completions",
    "frequency_penalty": "the sampler applies no penalty on completions",
    "logit_bias": "the sampler applies no logit bias on completions",
    "user": "a completion has no conversation (its prompt is sent whole each time)",
}


def validate_completion(request: CompletionRequest, max_tokens_limit: int) -> tuple[ChatCall, ...]:
    """One call per prompt (a streamed request: one prompt); raises ApiError (400)."""
    if not request.model:
        raise ApiError(400, "'model' must name a model (see GET /v1/models)", code="invalid_value", param="model")
    for param, neutral in _NEUTRAL.items():
        if getattr(request, param) not in neutral:
            raise _refuse(param, _WHY[param])
    if request.n not in (None, 1):
        raise ApiError(400, f"'n' must be 1, got {request.n}", code="invalid_value", param="n")
    prompts = _texts(request.prompt, "prompt", MAX_PROMPTS)
    if request.stream and len(prompts) > 1:
        raise ApiError(
            400,
            "'prompt' must be one string when streaming, got a list of several",
            code="invalid_value",
            param="prompt",
        )
    check_max_tokens("max_tokens", request.max_tokens, max_tokens_limit)
    stop = (request.stop,) if isinstance(request.stop, str) else tuple(request.stop or ())
    if len(stop) > MAX_STOP or not all(stop):
        raise ApiError(400, f"'stop' must be up to {MAX_STOP} non-empty strings", code="invalid_value", param="stop")
    params = SamplingParams(
        max_tokens=request.max_tokens,
        temperature=request.temperature,
        top_p=request.top_p,
        seed=request.seed,
        stop=stop,
    )
    include_usage = bool(request.stream_options and request.stream_options.include_usage)
    return tuple(
        ChatCall(
            model=request.model,
            messages=(),
            prompt=prompt,
            params=params,
            stream=request.stream,
            include_usage=include_usage,
            session_id=None,
        )
        for prompt in prompts
    )
