"""Request validation: an OpenAI chat request in, a ChatCall or a clear ApiError out. Pure."""

from __future__ import annotations

import re
from typing import Any

import msgspec

from api_gateway.bounds import MAX_TOKENS, out_of_bounds
from api_gateway.client_tools import declared_tools, earlier_calls, openai_choice
from api_gateway.errors import ApiError
from api_gateway.fields import OPENAI_REFUSED, refuse_unsupported
from api_gateway.openai_types import ChatCompletionRequest, MessageIn, ResponseFormatIn, ToolIn
from api_gateway.response_format import NAME, openai_format
from nrt.core.manifest import Manifest
from nrt.core.protocol import ChatMessage, ResponseFormat, Role, SamplingParams
from nrt.core.routing import ModelCall, resolve_model

SESSION_HEADER = "x-nrt-session"
SESSION_PATTERN = re.compile(r"[A-Za-z0-9._:@-]{1,128}")  # the whole value (fullmatch)
ROLES: dict[str, Role] = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
}
MAX_STOP = 4
LOGIT_BIAS_MIN, LOGIT_BIAS_MAX = -100.0, 100.0
MAX_LOGIT_BIAS = 1024  # tokens per request (OpenAI allows 300; a mask over a vocabulary costs the same)


class ChatCall(msgspec.Struct, frozen=True, kw_only=True):
    """A valid chat request, ready to route."""

    model: str
    messages: tuple[ChatMessage, ...]
    params: SamplingParams
    stream: bool
    include_usage: bool
    session_id: str | None
    prompt: str | None = None  # a completion (``/v1/completions``): the raw text, instead of messages


def validate_chat(
    request: ChatCompletionRequest, session_header: str | None, max_tokens_limit: int, max_messages: int
) -> ChatCall:
    """Check everything that does not depend on the manifest; raises ApiError (400)."""
    if not request.model:
        raise ApiError(400, "'model' must name a model (see GET /v1/models)", code="invalid_value", param="model")
    if request.n not in (None, 1):
        raise ApiError(400, f"'n' must be 1, got {request.n}", code="invalid_value", param="n")
    refuse_unsupported(((name, getattr(request, name)) for name in OPENAI_REFUSED), OPENAI_REFUSED)
    if request.stream_options is not None and request.stream_options.include_obfuscation:
        raise ApiError(
            400,
            "'stream_options.include_obfuscation' is not supported: NRT pads no stream events; send false or omit it",
            code="unsupported_parameter",
            param="stream_options.include_obfuscation",
        )
    return ChatCall(
        model=request.model,
        messages=_messages(request.messages, max_messages),
        params=_params(request, max_tokens_limit),
        stream=request.stream,
        include_usage=bool(request.stream_options and request.stream_options.include_usage),
        session_id=session_from(session_header, request.user),
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
        for field, value in (("function_call", message.function_call), ("audio", message.audio)):
            if value is not None:
                raise ApiError(
                    400,
                    f"messages[{i}].{field} is not supported: the deprecated function calls are not (send "
                    "'tool_calls'), and no model of this cluster speaks audio",
                    code="unsupported_parameter",
                    param=f"messages[{i}].{field}",
                )
        out.append(ChatMessage(role=role, content=_named(message, i, _turn_text(message, i))))
    if not any(m.role == "user" for m in out):
        raise ApiError(
            400, "'messages' must contain at least one message with role 'user'", code="invalid_value", param="messages"
        )
    return tuple(out)


def _named(message: MessageIn, index: int, text: str) -> str:
    """A turn's text said by its participant: ``name: text`` when the message names one (how the model tells
    participants of one role apart; a tool result's name is its function's, which its call already says)."""
    if message.name is None or message.role == "tool":
        return text
    if not NAME.fullmatch(message.name):
        raise ApiError(
            400,
            f"messages[{index}].name must be 1-64 letters, digits, '_' or '-' (got {message.name!r})",
            code="invalid_value",
            param=f"messages[{index}].name",
        )
    return f"{message.name}: {text}"


def _turn_text(message: MessageIn, index: int) -> str:
    """A message's text: an assistant turn's calls written after its text (``nrt.core.tool_calls``)."""
    if message.role == "tool" and not message.tool_call_id:
        raise ApiError(
            400,
            f"messages[{index}].tool_call_id is missing: a tool message answers one of the calls before it",
            code="missing_required_parameter",
            param=f"messages[{index}].tool_call_id",
        )
    if message.tool_calls and message.role != "assistant":
        raise ApiError(
            400,
            f"messages[{index}].tool_calls is only for role 'assistant', not '{message.role}'",
            code="invalid_value",
            param=f"messages[{index}].tool_calls",
        )
    content = _content(message, index)
    calls = [(call.function.name, call.function.arguments) for call in message.tool_calls or ()]
    return earlier_calls(content, calls)


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
    """The sampling parameters; their bounds were enforced by the request's types (``api_gateway.bounds``)
    when the body was decoded, but for ``max_tokens``' upper limit, a setting."""
    check_max_tokens("max_tokens", request.max_tokens, limit)
    check_max_tokens("max_completion_tokens", request.max_completion_tokens, limit)
    max_tokens = request.max_completion_tokens if request.max_completion_tokens is not None else request.max_tokens
    stop = (request.stop,) if isinstance(request.stop, str) else tuple(request.stop or ())
    if len(stop) > MAX_STOP or not all(stop):
        raise ApiError(400, f"'stop' must be up to {MAX_STOP} non-empty strings", code="invalid_value", param="stop")
    choice, function = openai_choice(request.tool_choice)
    tools = declared_tools(
        [_function(tool, i) for i, tool in enumerate(request.tools or ())],
        choice,
        function,
        request.parallel_tool_calls,
    )
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=request.temperature,
        top_p=request.top_p,
        seed=request.seed,
        stop=stop,
        response_format=_response_format(request.response_format),
        tools=tools,
        presence_penalty=request.presence_penalty or 0.0,
        frequency_penalty=request.frequency_penalty or 0.0,
        logit_bias=logit_bias(request.logit_bias),
        logprobs=bool(request.logprobs),
        top_logprobs=_top_logprobs(request),
    )


def _function(tool: ToolIn, index: int) -> tuple[str, str | None, Any]:
    if tool.type != "function":
        raise ApiError(
            400,
            f"tools[{index}].type '{tool.type[:40]}' is not supported; valid type: 'function'",
            code="invalid_value",
            param=f"tools[{index}].type",
        )
    if tool.function is None:
        raise ApiError(
            400,
            f"missing required parameter 'tools[{index}].function'",
            code="missing_required_parameter",
            param=f"tools[{index}].function",
        )
    return tool.function.name, tool.function.description, tool.function.parameters


def _top_logprobs(request: ChatCompletionRequest) -> int:
    if request.top_logprobs and not request.logprobs:
        raise ApiError(
            400,
            "'top_logprobs' needs 'logprobs': true (the alternatives come with each token's log-probability)",
            code="invalid_value",
            param="top_logprobs",
        )
    return request.top_logprobs or 0


def logit_bias(given: dict[str, float] | None) -> tuple[tuple[int, float], ...]:
    """``logit_bias`` as (token id, bias) pairs, sorted; a 400 naming a key that is no token id or a bias
    outside [-100, 100]. The ids are checked against the model's vocabulary by the worker that runs it."""
    pairs = []
    for key, bias in (given or {}).items():
        if not (key.isascii() and key.isdigit()):
            raise ApiError(
                400,
                f"'logit_bias' keys must be token ids (non-negative integers as strings), got {key[:40]!r}",
                code="invalid_value",
                param=f"logit_bias.{key[:40]}",
            )
        if not LOGIT_BIAS_MIN <= bias <= LOGIT_BIAS_MAX:
            raise ApiError(
                400,
                f"'logit_bias' values must be between -100 and 100, got {bias} for token {key}",
                code="invalid_value",
                param=f"logit_bias.{key}",
            )
        pairs.append((int(key), float(bias)))
    if len(pairs) > MAX_LOGIT_BIAS:
        raise ApiError(
            400,
            f"'logit_bias' holds {len(pairs)} tokens; the limit is {MAX_LOGIT_BIAS}",
            code="invalid_value",
            param="logit_bias",
        )
    return tuple(sorted(pairs))


def _response_format(given: ResponseFormatIn | None) -> ResponseFormat | None:
    if given is None:
        return None
    json_schema = given.json_schema
    return openai_format(
        given.type,
        json_schema.name if json_schema is not None else None,
        json_schema.schema if json_schema is not None else None,
        has_json_schema=json_schema is not None,
    )


def check_max_tokens(name: str, value: int | None, limit: int) -> None:
    """A 400 unless ``value`` (when given) lies between 1 and the gateway's ``limit`` (a setting)."""
    assert MAX_TOKENS.ge is not None
    if value is not None and not MAX_TOKENS.ge <= value <= limit:
        raise ApiError(400, out_of_bounds(name, MAX_TOKENS, value, high=limit), code="invalid_value", param=name)


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
