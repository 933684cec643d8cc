"""Request validation for ``POST /v1/messages``: an Anthropic Messages request in, a ChatCall or a clear ApiError out. Pure.

The same ChatCall as an OpenAI request makes (``api_gateway.validate``), with Anthropic's
rules: ``max_tokens`` is required, ``system`` is a top-level field, the roles are ``user``
and ``assistant``, ``temperature`` lies in [0, 1], and ``metadata.user_id`` is the
conversation id when no ``X-NRT-Session`` header is sent.
"""

from __future__ import annotations

from api_gateway.anthropic_types import BlockIn, MessageParam, MessagesRequest, ToolChoiceParam
from api_gateway.client_tools import arguments_text, declared_tools, earlier_calls
from api_gateway.errors import ApiError
from api_gateway.fields import ANTHROPIC_REFUSED, refuse_unsupported
from api_gateway.response_format import anthropic_format
from api_gateway.validate import MAX_STOP, ChatCall, check_max_tokens, session_from
from nrt.core.protocol import ChatMessage, ResponseFormat, Role, SamplingParams, ToolChoice, Tools

ROLES: dict[str, Role] = {"user": "user", "assistant": "assistant"}
CHOICES: dict[str, ToolChoice] = {"auto": "auto", "any": "required", "tool": "required", "none": "none"}


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
        out += _turns(message, role, f"messages[{i}].content")
    if not any(m.role == "user" for m in out):
        raise ApiError(
            400, "'messages' must contain at least one message with role 'user'", code="invalid_value", param="messages"
        )
    return tuple(out)


def _turns(message: MessageParam, role: Role, where: str) -> list[ChatMessage]:
    """A message as the conversation's turns: an assistant's text with its ``tool_use`` calls written as the
    model writes them; a user's ``tool_result`` blocks as tool turns, in order, around its text."""
    if isinstance(message.content, str):
        return [ChatMessage(role=role, content=message.content)]
    turns: list[ChatMessage] = []
    texts: list[str] = []
    calls: list[tuple[str, str]] = []
    for j, block in enumerate(message.content):
        if role == "assistant" and block.type == "tool_use":
            if block.name is None or block.id is None:
                raise ApiError(
                    400,
                    f"{where}[{j}] (tool_use) needs its 'id' and 'name'",
                    code="missing_required_parameter",
                    param=f"{where}[{j}]",
                )
            calls.append((block.name, arguments_text(block.input)))
        elif role == "user" and block.type == "tool_result":
            if block.tool_use_id is None:
                raise missing_parameter(f"{where}[{j}].tool_use_id")
            if texts:
                turns.append(ChatMessage(role="user", content="\n".join(texts)))
                texts = []
            result = _text(block.content, f"{where}[{j}].content") if block.content is not None else ""
            turns.append(ChatMessage(role="tool", content=f"error: {result}" if block.is_error else result))
        else:
            texts.append(_text([BlockIn(type=block.type, text=block.text)], where, offset=j))
    if role == "assistant":
        return [ChatMessage(role="assistant", content=earlier_calls("\n".join(texts), calls))]
    if texts or not turns:
        turns.append(ChatMessage(role="user", content="\n".join(texts)))
    return turns


def missing_parameter(param: str) -> ApiError:
    return ApiError(400, f"missing required parameter '{param}'", code="missing_required_parameter", param=param)


def _tools(request: MessagesRequest) -> Tools | None:
    """``tools`` and ``tool_choice`` as the wire's tools (``any``: a call; ``tool``: the call of ``name``)."""
    given = []
    for i, tool in enumerate(request.tools or ()):
        if tool.type not in (None, "custom"):
            raise ApiError(
                400,
                f"tools[{i}].type '{tool.type[:40]}' is not supported: this cluster runs no server tools; "
                "declare client tools (type 'custom' or no type)",
                code="unsupported_parameter",
                param=f"tools[{i}].type",
            )
        given.append((tool.name, tool.description, tool.input_schema))
    choice, function, parallel = _choice(request.tool_choice)
    return declared_tools(given, choice, function, parallel)


def _choice(given: ToolChoiceParam | None) -> tuple[ToolChoice | None, str | None, bool | None]:
    if given is None:
        return None, None, None
    choice = CHOICES.get(given.type)
    if choice is None:
        raise ApiError(
            400,
            f"tool_choice.type '{given.type[:40]}' is not supported; valid types: 'auto', 'any', 'tool', 'none'",
            code="invalid_value",
            param="tool_choice.type",
        )
    if given.type == "tool" and given.name is None:
        raise missing_parameter("tool_choice.name")
    parallel = None if given.disable_parallel_tool_use is None else not given.disable_parallel_tool_use
    return choice, given.name if given.type == "tool" else None, parallel


def _text(content: str | list[BlockIn], where: str, offset: int = 0) -> str:
    """A string, or the text of ``text`` blocks joined by newlines; any other block is refused by name."""
    if isinstance(content, str):
        return content
    texts = []
    for j, block in enumerate(content, start=offset):
        if block.type != "text" or block.text is None:
            raise ApiError(
                400,
                f"{where}[{j}] is a '{block.type}' block; only 'text' blocks are supported here (and an "
                "assistant's 'tool_use', a user's 'tool_result')",
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
        tools=_tools(request),
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
