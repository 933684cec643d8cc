"""Request validation: an OpenAI chat request in, a ChatCall or a clear ApiError out. Pure."""

from __future__ import annotations

import math
import re

import msgspec

from api_gateway.errors import ApiError
from api_gateway.openai_types import ChatCompletionRequest, MessageIn
from nrt.core.manifest import Manifest
from nrt.core.protocol import ChatMessage, Role, SamplingParams
from nrt.core.routing import ModelCall, resolve_model

SESSION_HEADER = "x-nrt-session"
SESSION_PATTERN = re.compile(r"[A-Za-z0-9._:@-]{1,128}")  # the whole value (fullmatch)
ROLES: dict[str, Role] = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
MAX_STOP = 4
SEED_MAX = 2**63 - 1  # seeds are non-negative signed 64-bit integers


class ChatCall(msgspec.Struct, frozen=True, kw_only=True):
    """A valid chat request, ready to route."""

    model: str
    messages: tuple[ChatMessage, ...]
    params: SamplingParams
    stream: bool
    include_usage: bool
    session_id: str | None


def validate_chat(
    request: ChatCompletionRequest, session_header: str | None, max_tokens_limit: int, max_messages: int
) -> ChatCall:
    """Check everything that does not depend on the manifest; raises ApiError (400)."""
    if not request.model:
        raise ApiError(400, "'model' must name a model (see GET /v1/models)", code="invalid_value", param="model")
    if request.n not in (None, 1):
        raise ApiError(400, f"'n' must be 1, got {request.n}", code="invalid_value", param="n")
    for param, tools in (("tools", request.tools), ("functions", request.functions)):
        if tools:
            raise ApiError(400, no_tools(param), code="unsupported_parameter", param=param)
    return ChatCall(
        model=request.model,
        messages=_messages(request.messages, max_messages),
        params=_params(request, max_tokens_limit),
        stream=request.stream,
        include_usage=bool(request.stream_options and request.stream_options.include_usage),
        session_id=session_from(session_header, request.user),
    )


def no_tools(param: str) -> str:
    """Why a request with client tools is refused (each API names its own parameter)."""
    return (
        f"'{param}' is not supported: no model of this cluster calls client tools "
        "(the router's dispatch_to_specialist hop is the only tool call it shows); send the request without it"
    )


def check_model(manifest: Manifest, version: int, model: str) -> ModelCall:
    """``routed`` (the entry model) or ``direct``; an unknown model is a 404."""
    call = resolve_model(manifest, model)
    if call is None:
        valid = ", ".join(f"'{m}'" for m in manifest.model_ids)
        raise ApiError(
            404,
            f"model '{model}' does not exist in manifest v{version}; "
            f"use '{manifest.routing.entry}' to route, or one of {valid}",
            code="model_not_found",
            param="model",
        )
    return call


def _messages(messages: list[MessageIn], limit: int) -> tuple[ChatMessage, ...]:
    if not messages:
        raise ApiError(400, "'messages' must contain at least one message", code="invalid_value", param="messages")
    if len(messages) > limit:
        raise ApiError(
            400,
            f"'messages' holds {len(messages)} messages; the limit is {limit}",
            code="too_many_messages",
            param="messages",
        )
    out = []
    for i, message in enumerate(messages):
        role = ROLES.get(message.role)
        if role is None:
            valid = ", ".join(f"'{r}'" for r in ROLES)
            raise ApiError(
                400,
                f"messages[{i}].role '{message.role}' is not supported; valid roles: {valid}",
                code="invalid_value",
                param=f"messages[{i}].role",
            )
        out.append(ChatMessage(role=role, content=_content(message, i)))
    if not any(m.role == "user" for m in out):
        raise ApiError(
            400, "'messages' must contain at least one message with role 'user'", code="invalid_value", param="messages"
        )
    return tuple(out)


def _content(message: MessageIn, index: int) -> str:
    if message.content is None:
        if message.role == "assistant":
            return ""
        raise ApiError(
            400, f"messages[{index}].content is missing", code="invalid_value", param=f"messages[{index}].content"
        )
    if isinstance(message.content, str):
        return message.content
    texts = []
    for j, part in enumerate(message.content):
        if part.type != "text" or part.text is None:
            raise ApiError(
                400,
                f"messages[{index}].content[{j}] has type '{part.type}'; only 'text' parts are supported",
                code="invalid_value",
                param=f"messages[{index}].content[{j}].type",
            )
        texts.append(part.text)
    return "\n".join(texts)


def _params(request: ChatCompletionRequest, limit: int) -> SamplingParams:
    for name, value in (("max_tokens", request.max_tokens), ("max_completion_tokens", request.max_completion_tokens)):
        if value is not None and not 1 <= value <= limit:
            raise ApiError(
                400, f"'{name}' must be between 1 and {limit}, got {value}", code="invalid_value", param=name
            )
    max_tokens = request.max_completion_tokens if request.max_completion_tokens is not None else request.max_tokens
    temperature, top_p = request.temperature, request.top_p
    if temperature is not None and not (math.isfinite(temperature) and 0.0 <= temperature <= 2.0):
        raise ApiError(
            400, f"'temperature' must be between 0 and 2, got {temperature}", code="invalid_value", param="temperature"
        )
    if top_p is not None and not (math.isfinite(top_p) and 0.0 < top_p <= 1.0):
        raise ApiError(400, f"'top_p' must be in (0, 1], got {top_p}", code="invalid_value", param="top_p")
    stop = (request.stop,) if isinstance(request.stop, str) else tuple(request.stop or ())
    if len(stop) > MAX_STOP or not all(stop):
        raise ApiError(400, f"'stop' must be up to {MAX_STOP} non-empty strings", code="invalid_value", param="stop")
    if request.seed is not None and not 0 <= request.seed <= SEED_MAX:
        raise ApiError(
            400, f"'seed' must be between 0 and {SEED_MAX}, got {request.seed}", code="invalid_value", param="seed"
        )
    return SamplingParams(max_tokens=max_tokens, temperature=temperature, top_p=top_p, seed=request.seed, stop=stop)


def session_from(header: str | None, user: str | None, field: str = "user") -> str | None:
    """The conversation id: the ``X-NRT-Session`` header, else the body's ``field`` (``user``), else none."""
    value, param = (header, "X-NRT-Session") if header else (user, field)
    if not value:
        return None
    if not SESSION_PATTERN.fullmatch(value):
        raise ApiError(
            400,
            f"{param} must be 1-128 characters of letters, digits and . _ : @ -, got {value[:40]!r}",
            code="invalid_value",
            param=param,
        )
    return value
