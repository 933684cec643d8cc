"""What the OpenAPI schema says each route answers: its errors in the OpenAI shape, SSE, the manifest upload.

Litestar documents a handler's success from its return type and, for a handler that takes
parameters, a 400 in its own ``{status_code, detail}`` shape. The gateway answers every
error as ``{"error": {...}}`` (:mod:`api_gateway.errors`): each route lists here every error
status it can return, with the ``ErrorResponse`` component, which replaces Litestar's 400.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec
from litestar import Response, route
from litestar.handlers import HTTPRouteHandler
from litestar.openapi import OpenAPIConfig, ResponseSpec
from litestar.openapi.spec import (
    Components,
    OpenAPI,
    OpenAPIMediaType,
    OpenAPIResponse,
    OpenAPIType,
    Parameter,
    Reference,
    RequestBody,
    Schema,
    SecurityScheme,
)
from litestar.openapi.spec.operation import Operation

from api_gateway import anthropic_types, endpoint_types, openai_types
from api_gateway.anthropic_types import MessagesRequest
from api_gateway.bounds import MAX_TOKENS, bound_of
from api_gateway.client_tools import CHOICES
from api_gateway.fields import ANTHROPIC_REFUSED, OPENAI_REFUSED
from api_gateway.openai_types import ChatCompletionRequest, ErrorResponse
from api_gateway.response_format import NAME, OPENAI_TYPES
from api_gateway.validate import MAX_STOP, ROLES, SESSION_HEADER, SESSION_PATTERN

ERRORS: dict[int, str] = {
    400: "The request is invalid: `message` names the problem, `param` the parameter.",
    401: "No valid key: send `Authorization: Bearer <key>`.",
    403: "The key may not do this, or the action is disabled.",
    404: "The model does not exist in the manifest in force.",
    409: "Another manifest swap is in progress.",
    413: "The request body is larger than the gateway's limit (`NRT_GATEWAY_MAX_BODY_BYTES`).",
    422: "The manifest is invalid: `problems` lists every problem.",
    429: "Too many requests: retry after `Retry-After` seconds.",
    500: "An unexpected error: `message` names it.",
    502: "A service behind the gateway gave an invalid answer.",
    503: "The cluster cannot serve this now: not connected, no manifest, no worker serves the model, "
    "or a manifest swap outlasted the admission wait (`Retry-After`).",
    504: "No answer within the deadline.",
}
KEYED = (401, 403, 429)  # /v1/* routes once API keys are on
ADMIN_SCHEME = "AdminKey"


def errors(*statuses: int) -> dict[int, ResponseSpec]:
    """The error responses of a route: each status with its meaning, in the OpenAI error shape."""
    return {
        status: ResponseSpec(ErrorResponse, description=ERRORS[status], generate_examples=False)
        for status in sorted(statuses)
    }


SSE_EVENT = Schema(
    type=OpenAPIType.OBJECT,
    required=["data"],
    properties={
        "data": Schema(
            type=OpenAPIType.STRING,
            description="a `ChatCompletionChunk` as JSON; after an error, an `ErrorResponse` as JSON; last, `[DONE]`",
        ),
        "event": Schema(type=OpenAPIType.STRING),
    },
    description="One server-sent event of a streamed chat completion (`stream: true`).",
)


SESSION = Schema(
    type=OpenAPIType.STRING,
    pattern=f"^({SESSION_PATTERN.pattern})?$",
    description="a conversation id (empty: none); the model keeps its KV cache between the conversation's turns",
)


@dataclass
class ChatOperation(Operation):
    """``POST /v1/chat/completions``: its 200 is JSON or, when the request asks to stream, server-sent
    events; the conversation id may come in a header."""

    def __post_init__(self) -> None:
        document_streamed_chat(self, SSE_EVENT)


def document_streamed_chat(operation: Operation, event: Schema) -> None:
    """A chat operation's 200 is JSON or server-sent events (each ``event``); the conversation id may come
    in the ``X-NRT-Session`` header."""
    ok = (operation.responses or {}).get("200")
    assert isinstance(ok, OpenAPIResponse), "document the JSON 200 first"
    assert ok.content is not None
    ok.content["text/event-stream"] = OpenAPIMediaType(schema=event)
    header = Parameter(name="X-NRT-Session", param_in="header", schema=SESSION, description=SESSION.description)
    assert header.name.lower() == SESSION_HEADER
    operation.parameters = [*(operation.parameters or []), header]


def _document_conversation(fields: dict[str, Schema | Reference], max_messages: int) -> None:
    """A chat request's ``model`` (not empty) and ``messages`` (1 to ``max_messages``, one from the user)."""
    _value(fields["model"]).min_length = 1
    messages = _value(fields["messages"])
    messages.min_items, messages.max_items = 1, max_messages
    messages.contains = Schema(type=OpenAPIType.OBJECT, required=["role"], properties={"role": Schema(const="user")})
    messages.description = f"1 to {max_messages} messages, at least one from the user"


def _document_stop(stop: Schema | Reference) -> None:
    """``stop``: a non-empty string, or a list of at most ``MAX_STOP`` non-empty strings."""
    assert isinstance(stop, Schema)
    assert stop.one_of is not None
    for option in stop.one_of:
        assert isinstance(option, Schema)
        if option.type == OpenAPIType.STRING:
            option.min_length = 1
        elif option.type == OpenAPIType.ARRAY:
            option.max_items, option.items = MAX_STOP, Schema(type=OpenAPIType.STRING, min_length=1)


def _document_max_tokens(field: Schema, limit: int) -> None:
    """``max_tokens``: its upper limit is the gateway's setting."""
    field.minimum, field.maximum = MAX_TOKENS.ge, limit


def _document_bounds(fields: dict[str, Schema | Reference], request: type[msgspec.Struct]) -> None:
    """Each number's bounds, read from the ``msgspec.Meta`` its type declares (``api_gateway.bounds``)
    and written on the number's own schema. (Litestar puts them beside a nullable field's ``oneOf``
    and drops a bound of 0.)"""
    for name in request.__struct_fields__:
        meta = bound_of(request, name)
        if meta is None:
            continue
        outer, number = fields[name], _value(fields[name])
        assert isinstance(outer, Schema)
        outer.minimum = outer.maximum = outer.exclusive_minimum = outer.exclusive_maximum = None
        number.minimum, number.maximum, number.exclusive_minimum = meta.ge, meta.le, meta.gt


def document_chat_request(openapi: OpenAPI, max_tokens_limit: int, max_messages: int) -> None:
    """Write the rules :func:`api_gateway.validate.validate_chat` enforces into the request's schema
    (its fields come from the msgspec types; the limits from the settings), so that a request the
    schema allows is served and one it forbids gets a 400."""
    schemas = openapi.components.schemas if openapi.components and openapi.components.schemas else {}
    request, message, part = schemas["ChatCompletionRequest"], schemas["MessageIn"], schemas["ContentPart"]
    fields = request.properties or {}
    _document_conversation(fields, max_messages)
    for name in ("max_tokens", "max_completion_tokens"):
        _document_max_tokens(_value(fields[name]), max_tokens_limit)
    _document_bounds(fields, ChatCompletionRequest)
    _value(fields["n"]).const = 1
    _document_stop(fields["stop"])
    fields["user"] = Schema(one_of=[SESSION, Schema(type=OpenAPIType.NULL)], description=SESSION.description)
    _document_refused(fields, OPENAI_REFUSED)
    _document_closed(schemas)
    _document_response_format(schemas)
    # top_logprobs (other than 0) comes with logprobs: true
    request.any_of = [
        Schema(properties={"top_logprobs": Schema(enum=[None, 0])}),
        Schema(required=["logprobs"], properties={"logprobs": Schema(const=True)}),
    ]
    fields["logit_bias"] = Schema(
        one_of=[
            _NULL,
            Schema(
                type=OpenAPIType.OBJECT,
                property_names=Schema(type=OpenAPIType.STRING, pattern="^[0-9]+$"),
                additional_properties=Schema(type=OpenAPIType.NUMBER, minimum=-100, maximum=100),
            ),
        ],
        description="token id (as a string) -> a bias in [-100, 100] added to its logit; ids past the model's "
        "vocabulary are a 400",
    )
    stream_options = schemas["StreamOptions"].properties or {}
    stream_options["include_obfuscation"] = Schema(enum=[None, False], description="NRT pads no stream events")
    request.examples = [
        {"model": "router", "messages": [{"role": "user", "content": "I was charged twice"}], "max_tokens": 8}
    ]
    roles = message.properties or {}
    _value(roles["role"]).enum = list(ROLES)
    # the deprecated function calls and audio are refused: send tool_calls; no model here speaks audio
    for name in ("function_call", "audio"):
        roles[name] = _NULL
    roles["name"] = Schema(
        one_of=[Schema(type=OpenAPIType.STRING, pattern=f"^{NAME.pattern}$"), _NULL],
        description="the participant: the turn is written `name: content` (not for a tool's result)",
    )
    message.all_of = [
        # content may be left out (or null) by the assistant only
        Schema(
            any_of=[
                Schema(properties={"role": Schema(const="assistant")}),
                Schema(
                    required=["content"],
                    properties={"content": Schema(type=[OpenAPIType.STRING, OpenAPIType.ARRAY])},
                ),
            ]
        ),
        # a tool's result names the call it answers; only the assistant's turn carries calls
        Schema(
            any_of=[
                Schema(required=["role", "tool_call_id"], properties={"tool_call_id": Schema(min_length=1)}),
                Schema(properties={"role": Schema(enum=[r for r in ROLES if r != "tool"])}),
            ]
        ),
        Schema(
            any_of=[
                Schema(properties={"role": Schema(const="assistant")}),
                Schema(properties={"tool_calls": Schema(enum=[None, []])}),
            ]
        ),
    ]
    _document_tools(schemas, request)
    part.required = ["text", "type"]
    parts = part.properties or {}
    _value(parts["type"]).const = "text"
    parts["text"] = Schema(type=OpenAPIType.STRING)


def document_messages_request(openapi: OpenAPI, max_tokens_limit: int, max_messages: int) -> None:
    """Write the rules :func:`api_gateway.anthropic_validate.validate_messages` enforces into the
    ``POST /v1/messages`` request's schema, as :func:`document_chat_request` does for the chat one."""
    schemas = openapi.components.schemas if openapi.components and openapi.components.schemas else {}
    request, message, block = schemas["MessagesRequest"], schemas["MessageParam"], schemas["BlockIn"]
    fields = request.properties or {}
    _document_conversation(fields, max_messages)
    _document_max_tokens(_value(fields["max_tokens"]), max_tokens_limit)
    _document_bounds(fields, MessagesRequest)
    stop = _value(fields["stop_sequences"])
    stop.max_items, stop.items = MAX_STOP, Schema(type=OpenAPIType.STRING, min_length=1)
    _document_refused(fields, ANTHROPIC_REFUSED)
    _document_closed(schemas)
    (schemas["OutputConfig"].properties or {})["effort"] = Schema(
        type=OpenAPIType.NULL, description="refused: the models of this cluster are not reasoning models"
    )
    output_format = schemas["OutputFormat"]
    output_format.required = ["schema", "type"]
    formats = output_format.properties or {}
    _value(formats["type"]).const = "json_schema"
    formats["schema"] = _JSON_SCHEMA
    metadata = schemas["Metadata"].properties or {}
    metadata["user_id"] = Schema(one_of=[SESSION, Schema(type=OpenAPIType.NULL)], description=SESSION.description)
    request.examples = [
        {"model": "router", "max_tokens": 8, "messages": [{"role": "user", "content": "I was charged twice"}]}
    ]
    _value((message.properties or {})["role"]).enum = ["user", "assistant"]
    block.required = ["text", "type"]
    blocks = block.properties or {}
    _value(blocks["type"]).const = "text"
    blocks["text"] = Schema(type=OpenAPIType.STRING)
    _document_anthropic_tools(schemas, message, request)
    # a user turn of the user's own: not only tools' results
    only_results = Schema(
        type=OpenAPIType.ARRAY,
        min_items=1,
        items=Schema(type=OpenAPIType.OBJECT, properties={"type": Schema(const="tool_result")}),
    )
    _value(fields["messages"]).contains = Schema(
        type=OpenAPIType.OBJECT,
        required=["role", "content"],
        properties={"role": Schema(const="user"), "content": Schema(schema_not=only_results)},
    )


def _document_anthropic_tools(schemas: dict[str, Schema], message: Schema, request: Schema) -> None:
    """A message's blocks: ``text``, an assistant's ``tool_use``, a user's ``tool_result``; ``tools``."""
    content = schemas["ContentBlockIn"]
    fields = content.properties or {}
    _value(fields["type"]).enum = ["text", "tool_use", "tool_result"]
    content.required = ["type"]
    content.any_of = [
        Schema(required=["text"], properties={"type": Schema(const="text"), "text": Schema(type=OpenAPIType.STRING)}),
        Schema(
            required=["id", "name"],
            properties={
                "type": Schema(const="tool_use"),
                "id": Schema(type=OpenAPIType.STRING),
                "name": Schema(type=OpenAPIType.STRING),
            },
        ),
        Schema(
            required=["tool_use_id"],
            properties={"type": Schema(const="tool_result"), "tool_use_id": Schema(type=OpenAPIType.STRING)},
        ),
    ]
    only = {
        "user": Schema(enum=["text", "tool_result"]),
        "assistant": Schema(enum=["text", "tool_use"]),
    }
    message.any_of = [
        Schema(
            properties={
                "role": Schema(const=role),
                "content": Schema(
                    one_of=[
                        Schema(type=OpenAPIType.STRING),
                        Schema(
                            type=OpenAPIType.ARRAY,
                            items=Schema(type=OpenAPIType.OBJECT, properties={"type": kinds}),
                        ),
                    ]
                ),
            }
        )
        for role, kinds in only.items()
    ]
    tool = schemas["ToolParam"]
    tools = tool.properties or {}
    tools["name"] = Schema(type=OpenAPIType.STRING, pattern=f"^{NAME.pattern}$")
    tools["type"] = Schema(enum=[None, "custom"], description="client tools only (no server tools)")
    tools["input_schema"] = _JSON_SCHEMA
    choice = schemas["ToolChoiceParam"]
    _value((choice.properties or {})["type"]).enum = ["auto", "any", "tool", "none"]
    # ``tool`` names one of ``tools`` (not a thing a schema can say: a 400 otherwise); ``any`` and ``tool`` need tools
    choice.any_of = [
        Schema(properties={"type": Schema(enum=["auto", "any", "none"])}),
        Schema(required=["name"], properties={"type": Schema(const="tool"), "name": Schema(type=OpenAPIType.STRING)}),
    ]
    request.all_of = [
        *(request.all_of or []),
        Schema(
            any_of=[
                Schema(
                    properties={
                        "tool_choice": Schema(
                            one_of=[_NULL, Schema(properties={"type": Schema(enum=["auto", "none"])})]
                        )
                    }
                ),
                Schema(required=["tools"], properties={"tools": Schema(type=OpenAPIType.ARRAY, min_items=1)}),
            ]
        ),
    ]


_NULL = Schema(type=OpenAPIType.NULL)


def _document_refused(fields: dict[str, Schema | Reference], table: dict[str, tuple[tuple[object, ...], str]]) -> None:
    """A field NRT refuses (``api_gateway.fields``) allows only null or the values that ask for nothing it cannot do."""
    for name, (harmless, why) in table.items():
        fields[name] = Schema(
            enum=[None, *harmless], description=f"refused unless absent or one of the values listed: {why}"
        )


def _document_closed(schemas: dict[str, Schema]) -> None:
    """The request types whose decoding refuses a field they do not declare (a 400 ``unknown_parameter``) say so."""
    for module in (openai_types, anthropic_types, endpoint_types):
        for kind in vars(module).values():
            closed = isinstance(kind, type) and issubclass(kind, msgspec.Struct)
            if closed and kind.__struct_config__.forbid_unknown_fields and kind.__name__ in schemas:
                schemas[kind.__name__].additional_properties = False


_JSON_SCHEMA = Schema(
    type=OpenAPIType.OBJECT,
    description="A JSON Schema: the answer is constrained to it. One the grammar engine cannot compile is a 400 "
    "(code `invalid_response_format`).",
)


def _document_response_format(schemas: dict[str, Schema]) -> None:
    """``response_format``: ``text``, ``json_object``, or ``json_schema`` with its ``json_schema`` (name and schema)."""
    given, json_schema = schemas["ResponseFormatIn"], schemas["JsonSchemaFormat"]
    _value((given.properties or {})["type"]).enum = list(OPENAI_TYPES)
    given.any_of = [
        Schema(properties={"type": Schema(enum=["text", "json_object"]), "json_schema": Schema(type=OpenAPIType.NULL)}),
        Schema(
            required=["json_schema"],
            properties={
                "type": Schema(const="json_schema"),
                "json_schema": Reference(ref="#/components/schemas/JsonSchemaFormat"),
            },
        ),
    ]
    json_schema.required = ["name", "schema"]
    fields = json_schema.properties or {}
    fields["name"] = Schema(type=OpenAPIType.STRING, pattern=f"^{NAME.pattern}$")
    fields["schema"] = _JSON_SCHEMA


def _document_tools(schemas: dict[str, Schema], request: Schema) -> None:
    """``tools`` (functions named as OpenAI names them, their parameters a JSON Schema) and ``tool_choice``
    (a mode, or a named function of ``tools``; anything but ``none`` needs tools)."""
    tool, function, choice = schemas["ToolIn"], schemas["FunctionIn"], schemas["ToolChoiceIn"]
    tool.required = ["function", "type"]
    tools = tool.properties or {}
    _value(tools["type"]).const = "function"
    tools["function"] = Reference(ref="#/components/schemas/FunctionIn")
    functions = function.properties or {}
    functions["name"] = Schema(type=OpenAPIType.STRING, pattern=f"^{NAME.pattern}$")
    functions["parameters"] = Schema(
        one_of=[_NULL, _JSON_SCHEMA], description="the parameters' JSON Schema (absent: no parameters)"
    )
    choice.required = ["function", "type"]
    _value((choice.properties or {})["type"]).const = "function"
    (choice.properties or {})["function"] = Reference(ref="#/components/schemas/NamedFunction")
    fields = request.properties or {}
    fields["tool_choice"] = Schema(
        one_of=[Schema(enum=[None, *CHOICES]), Reference(ref="#/components/schemas/ToolChoiceIn")],
        description="`auto` (text or calls), `none` (text), `required` (calls), or a named function of `tools` "
        "(a function it does not declare is a 400); `required` and a named function need `tools`",
    )
    _value(fields["tools"]).description = (
        "functions the model may call: the answer's calls are constrained to their parameters' schemas (one the "
        "grammar engine cannot compile is a 400, code `invalid_response_format`)"
    )
    request.all_of = [
        *(request.all_of or []),
        Schema(
            any_of=[
                Schema(properties={"tool_choice": Schema(enum=[None, "none", "auto"])}),
                Schema(required=["tools"], properties={"tools": Schema(type=OpenAPIType.ARRAY, min_items=1)}),
            ]
        ),
    ]


def _value(schema: Schema | Reference) -> Schema:
    """The schema of a field's value: its non-null option when it may be null."""
    assert isinstance(schema, Schema)
    if schema.one_of is None:
        return schema
    options = [s for s in schema.one_of if isinstance(s, Schema) and s.type != OpenAPIType.NULL]
    assert len(options) == 1, f"one non-null option expected, got {options}"
    return options[0]


@dataclass
class ManifestUpload(Operation):
    """``PUT /v1/manifest``: the body is the manifest's YAML text (the handler reads it raw)."""

    def __post_init__(self) -> None:
        text = OpenAPIMediaType(schema=Schema(type=OpenAPIType.STRING, description="the manifest, as YAML"))
        self.request_body = RequestBody(
            content={"application/yaml": text, "text/plain": text}, required=True, description="the new manifest"
        )


def openapi_config() -> OpenAPIConfig:
    return OpenAPIConfig(
        title="NRT API",
        version="0.1.0",
        path="/schema",
        components=Components(
            security_schemes={
                ADMIN_SCHEME: SecurityScheme(
                    type="http", scheme="bearer", description="the admin key (`NRT_ADMIN_KEY`)"
                )
            }
        ),
    )


def options_handler(path: str, *handlers: HTTPRouteHandler) -> HTTPRouteHandler:
    """``OPTIONS path`` for a path served by several handlers: Litestar's own answer lists only the
    first one's methods; this one lists them all. Register it before them."""
    methods = ", ".join(sorted({"OPTIONS", *(m for h in handlers for m in h.http_methods)}))

    def options() -> Response[None]:
        return Response(None, status_code=204, headers={"Allow": methods})

    return route(path, http_method="OPTIONS", include_in_schema=False, status_code=204, sync_to_thread=False)(options)
