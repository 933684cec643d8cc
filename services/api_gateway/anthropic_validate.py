"""Request validation for ``POST /v1/messages``: an Anthropic Messages request in, a ChatCall or a clear ApiError out. Pure.

The same ChatCall as an OpenAI request makes (``api_gateway.validate``), with Anthropic's
rules: ``max_tokens`` is required, ``system`` is a top-level field, the roles are ``user``
and ``assistant``, ``temperature`` lies in [0, 1], and ``metadata.user_id`` is the
conversation id when no ``X-NRT-Session`` header is sent.
"""

from __future__ import annotations

from api_gateway.anthropic_types import BlockIn, MessagesRequest
from api_gateway.errors import ApiError
from api_gateway.fields import ANTHROPIC_REFUSED, refuse_unsupported
from api_gateway.response_format import anthropic_format
from api_gateway.validate import MAX_STOP, ChatCall, check_max_tokens, session_from
from nrt.core.protocol import ChatMessage, ResponseFormat, Role, SamplingParams

ROLES: dict[str, Role] = {"user": "user", "assistant": "assistant"}


def validate_messages(
    request: MessagesRequest, session_header: str | None, max_tokens_limit: int, max_messages: int
) -> ChatCall:
    """Check everything that does not depend on the manifest; raises ApiError (400)."""
    if not request.model:
        raise ApiError(400, "'model' must name a model (see GET /v1/models)", code="invalid_value", param="model")
    refuse_unsupported(((name, getattr(request, name)) for name in ANTHROPIC_REFUSED), ANTHROPIC_REFUSED)
    if request.output_config is not None and request.output_config.effort is not None:
        raise ApiError(
            400,
            "'output_config.effort' is not supported: the models of this cluster are not reasoning models; omit it",
            code="unsupported_parameter",
            param="output_config.effort",
        )
    system = _text(request.system, "system") if request.system is not None else ""
    messages = _messages(request, max_messages)
    return ChatCall(
        model=request.model,
        messages=((ChatMessage("system", system),) if system else ()) + messages,
        params=_params(request, max_tokens_limit),
        stream=request.stream,
        include_usage=False,
        session_id=session_from(
            session_header, request.metadata.user_id if request.metadata else None, "metadata.user_id"
        ),
    )


def _messages(request: MessagesRequest, limit: int) -> tuple[ChatMessage, ...]:
    if not request.messages:
        raise ApiError(400, "'messages' must contain at least one message", code="invalid_value", param="messages")
    if len(request.messages) > limit:
        raise ApiError(
            400,
            f"'messages' holds {len(request.messages)} messages; the limit is {limit}",
            code="too_many_messages",
            param="messages",
        )
    out = []
    for i, message in enumerate(request.messages):
        role = ROLES.get(message.role)
        if role is None:
            hint = "; put the system prompt in the top-level 'system' field" if message.role == "system" else ""
            raise ApiError(
                400,
                f"messages[{i}].role '{message.role}' is not supported; valid roles: 'user', 'assistant'{hint}",
                code="invalid_value",
                param=f"messages[{i}].role",
            )
        out.append(ChatMessage(role=role, content=_text(message.content, f"messages[{i}].content")))
    if not any(m.role == "user" for m in out):
        raise ApiError(
            400, "'messages' must contain at least one message with role 'user'", code="invalid_value", param="messages"
        )
    return tuple(out)


def _text(content: str | list[BlockIn], where: str) -> str:
    """A string, or the text of ``text`` blocks joined by newlines; any other block is refused by name."""
    if isinstance(content, str):
        return content
    texts = []
    for j, block in enumerate(content):
        if block.type != "text" or block.text is None:
            raise ApiError(
                400,
                f"{where}[{j}] is a '{block.type}' block; only 'text' blocks are supported",
                code="invalid_value",
                param=f"{where}[{j}].type",
            )
        texts.append(block.text)
    return "\n".join(texts)


def _params(request: MessagesRequest, limit: int) -> SamplingParams:
    """The sampling parameters; their bounds were enforced by the request's types (``api_gateway.bounds``)
    when the body was decoded, but for ``max_tokens``' upper limit, a setting."""
    check_max_tokens("max_tokens", request.max_tokens, limit)
    stop = tuple(request.stop_sequences or ())
    if len(stop) > MAX_STOP or not all(stop):
        raise ApiError(
            400,
            f"'stop_sequences' must be up to {MAX_STOP} non-empty strings",
            code="invalid_value",
            param="stop_sequences",
        )
    return SamplingParams(
        max_tokens=request.max_tokens,
        temperature=request.temperature,
        top_p=request.top_p,
        top_k=request.top_k,
        stop=stop,
        response_format=_output_format(request),
    )


def _output_format(request: MessagesRequest) -> ResponseFormat | None:
    """``output_config.format`` (or the beta's ``output_format``; not both) as the wire's response format."""
    configured = request.output_config.format if request.output_config is not None else None
    if configured is not None and request.output_format is not None:
        raise ApiError(
            400,
            "send the output format once: 'output_config.format' or 'output_format', not both",
            code="invalid_value",
            param="output_format",
        )
    if configured is not None:
        return anthropic_format(configured.type, configured.schema, "output_config.format")
    if request.output_format is not None:
        return anthropic_format(request.output_format.type, request.output_format.schema, "output_format")
    return None
