"""Structured outputs, in memory: the gateway's checks of a response format (a 400 in the API's own
error shape naming the problem), and the wire carrying the format from the gateway to the engine."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from api_gateway.anthropic_types import MessagesRequest
from api_gateway.anthropic_validate import validate_messages
from api_gateway.body import decode_request
from api_gateway.errors import ApiError
from api_gateway.openai_types import ChatCompletionRequest
from api_gateway.validate import validate_chat
from nrt.adapters.bus.errors import INVALID_RESPONSE_FORMAT, RemoteError
from nrt.core.protocol import (
    ChatMessage,
    GenerateRequest,
    InferRequest,
    ResponseFormat,
    RouteRequest,
    SamplingParams,
)
from nrt.hosting.model_sources import RemoteEndpoint
from nrt.hosting.prompts import generation_request
from nrt.hosting.remote import anthropic_messages, openai_chat
from nrt.hosting.remote.answer import remote_call

USER = {"role": "user", "content": "hello"}
SCHEMA = {"type": "object", "properties": {"b": {"type": "integer"}, "a": {"type": "string"}}, "required": ["a"]}


def chat_params(response_format: object) -> SamplingParams:
    body = {"model": "router", "messages": [USER], "response_format": response_format}
    request = decode_request(msgspec.json.encode(body), ChatCompletionRequest)
    return validate_chat(request, None, max_tokens_limit=1000, max_messages=8).params


def chat_error(response_format: object) -> ApiError:
    with pytest.raises(ApiError) as caught:
        chat_params(response_format)
    return caught.value


def test_text_is_no_constraint() -> None:
    assert chat_params({"type": "text"}).response_format is None
    body = {"model": "router", "messages": [USER]}
    request = decode_request(msgspec.json.encode(body), ChatCompletionRequest)
    assert validate_chat(request, None, 1000, 8).params.response_format is None


def test_json_object() -> None:
    assert chat_params({"type": "json_object"}).response_format == ResponseFormat(type="json_object")


def test_json_schema_travels_as_text_in_the_clients_key_order() -> None:
    given = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}}
    found = chat_params(given).response_format
    assert found is not None
    assert found.type == "json_schema"
    assert found.name == "person"
    assert found.schema is not None
    assert json.loads(found.schema) == SCHEMA
    # the properties keep their order: the answer writes "b" before "a", as the schema lists them
    assert found.schema.index('"b"') < found.schema.index('"a"')


@pytest.mark.parametrize(
    ("response_format", "param", "code", "says"),
    [
        ({"type": "yaml"}, "response_format", "invalid_value", "'yaml' is not supported; valid types: 'text'"),
        ({"type": "json_schema"}, "response_format.json_schema", "missing_required_parameter", "missing"),
        (
            {"type": "text", "json_schema": {"name": "x", "schema": SCHEMA}},
            "response_format.json_schema",
            "invalid_value",
            "only for response_format.type 'json_schema', not 'text'",
        ),
        (
            {"type": "json_schema", "json_schema": {"schema": SCHEMA}},
            "response_format.json_schema.name",
            "missing_required_parameter",
            "missing required parameter 'response_format.json_schema.name'",
        ),
        (
            {"type": "json_schema", "json_schema": {"name": "has space", "schema": SCHEMA}},
            "response_format.json_schema.name",
            "invalid_value",
            "1-64 letters, digits, underscores or dashes",
        ),
        (
            {"type": "json_schema", "json_schema": {"name": "x"}},
            "response_format.json_schema.schema",
            "missing_required_parameter",
            "missing required parameter",
        ),
        (
            {"type": "json_schema", "json_schema": {"name": "x", "schema": [1, 2]}},
            "response_format.json_schema.schema",
            "invalid_value",
            "must be a JSON Schema object, got list",
        ),
    ],
)
def test_a_bad_response_format_is_a_400_naming_it(response_format: object, param: str, code: str, says: str) -> None:
    error = chat_error(response_format)
    assert (error.status, error.param, error.code) == (400, param, code)
    assert says in error.message
    body = msgspec.json.decode(msgspec.json.encode(error.body()))
    assert body["error"]["param"] == param
    assert body["error"]["type"] == "invalid_request_error"


def test_a_schema_the_engine_cannot_compile_comes_back_as_a_400_naming_response_format() -> None:
    """The worker's error frame (code ``invalid_response_format``) becomes the API's 400 with the param."""
    frame = RemoteError(INVALID_RESPONSE_FORMAT, "the JSON schema cannot be compiled: Unknown type: 'strin'", 400)
    error = ApiError.from_remote(frame)
    assert (error.status, error.code, error.param) == (400, INVALID_RESPONSE_FORMAT, "response_format")
    assert "Unknown type" in error.message


def messages_params(**fields: Any) -> SamplingParams:
    body = {"model": "router", "max_tokens": 10, "messages": [USER], **fields}
    request = decode_request(msgspec.json.encode(body), MessagesRequest)
    return validate_messages(request, None, max_tokens_limit=1000, max_messages=8).params


def test_anthropic_output_config_format_is_honoured() -> None:
    fmt = {"type": "json_schema", "schema": SCHEMA}
    found = messages_params(output_config={"format": fmt}).response_format
    assert found is not None
    assert found.type == "json_schema"
    assert json.loads(found.schema or "") == SCHEMA
    assert messages_params(output_format=fmt).response_format == found  # the beta's name for it
    assert messages_params().response_format is None


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"output_config": {"format": {"type": "json_object"}}}, "output_config.format"),
        ({"output_format": {"type": "json_schema"}}, "output_format.schema"),
        (
            {
                "output_format": {"type": "json_schema", "schema": SCHEMA},
                "output_config": {"format": {"type": "json_schema", "schema": SCHEMA}},
            },
            "output_format",
        ),
    ],
)
def test_a_bad_anthropic_output_format_is_a_400_naming_it(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(ApiError) as caught:
        messages_params(**fields)
    assert (caught.value.status, caught.value.param) == (400, param)


FORMAT = ResponseFormat(type="json_schema", schema=json.dumps(SCHEMA), name="person")


def test_the_format_travels_gateway_to_router_to_worker_to_engine() -> None:
    """Each hop's message decoded as its reader decodes it (router_svc forwards ``params`` whole; the
    stack test in tests/integration/gateway/test_structured_outputs.py runs the real hops)."""
    params = SamplingParams(max_tokens=5, response_format=FORMAT)
    messages = (ChatMessage("user", "hi"),)
    route = RouteRequest(request_id="r1", manifest_version=1, model="router", messages=messages, params=params)
    route = msgspec.json.decode(msgspec.json.encode(route), type=RouteRequest)  # gateway -> router_svc
    assert route.params == params
    generate = GenerateRequest(
        request_id="r1", model_id="billing", manifest_version=1, messages=messages, params=route.params
    )
    wire = msgspec.json.decode(msgspec.json.encode(generate), type=InferRequest)  # router_svc -> the worker
    assert isinstance(wire, GenerateRequest)
    assert wire.params.response_format == FORMAT
    engine = generation_request(wire, None, None)
    assert engine.response_format == FORMAT


def endpoint(protocol: str) -> RemoteEndpoint:
    return RemoteEndpoint(base_url="http://127.0.0.1:9/v1", model="m", protocol=protocol)


def test_a_remote_model_gets_the_format_in_its_own_api() -> None:
    request = GenerateRequest(
        request_id="r1", model_id="m", manifest_version=1, messages=(ChatMessage("user", "hi"),),
        params=SamplingParams(max_tokens=5, response_format=FORMAT),
    )  # fmt: skip
    call = remote_call(request, None)
    body = openai_chat.request_body(endpoint("openai"), call)
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "person", "schema": SCHEMA, "strict": True},
    }
    body = anthropic_messages.request_body(endpoint("anthropic"), call)
    assert body["output_config"] == {"format": {"type": "json_schema", "schema": SCHEMA}}


def test_an_anthropic_endpoint_refuses_json_object_rather_than_answering_free_text() -> None:
    request = GenerateRequest(
        request_id="r1", model_id="m", manifest_version=1, messages=(ChatMessage("user", "hi"),),
        params=SamplingParams(response_format=ResponseFormat(type="json_object")),
    )  # fmt: skip
    call = remote_call(request, None)
    assert openai_chat.request_body(endpoint("openai"), call)["response_format"] == {"type": "json_object"}
    with pytest.raises(RemoteError) as caught:
        anthropic_messages.request_body(endpoint("anthropic"), call)
    assert caught.value.status == 400
    assert "json_object" in caught.value.message


def test_a_remote_model_gets_the_penalties_and_bias_or_refuses_them() -> None:
    """The remote tier passes OpenAI's sampling fields on to an OpenAI endpoint; an Anthropic one has no
    such fields, so the request is a 400 naming the field rather than answered without it."""
    params = SamplingParams(presence_penalty=0.5, frequency_penalty=-1.0, logit_bias=((7, 50.0),))
    request = GenerateRequest(
        request_id="r1", model_id="m", manifest_version=1, messages=(ChatMessage("user", "hi"),), params=params
    )
    wire = msgspec.json.decode(msgspec.json.encode(request), type=InferRequest)
    assert isinstance(wire, GenerateRequest)
    assert wire.params == params
    engine = generation_request(wire, None, None)
    assert (engine.presence_penalty, engine.frequency_penalty, engine.logit_bias) == (0.5, -1.0, ((7, 50.0),))
    body = openai_chat.request_body(endpoint("openai"), remote_call(wire, None))
    assert (body["presence_penalty"], body["frequency_penalty"], body["logit_bias"]) == (0.5, -1.0, {"7": 50.0})
    with pytest.raises(RemoteError) as caught:
        anthropic_messages.request_body(endpoint("anthropic"), remote_call(wire, None))
    assert caught.value.status == 400
    assert "'presence_penalty' is not supported" in caught.value.message
