"""Decoding untrusted JSON bodies (pure): UTF-8, the nesting bound, the decoder's errors as 400s."""

from __future__ import annotations

import json

import pytest
from litestar.exceptions import ValidationException

from api_gateway.body import conform, decode_json_body, decode_request, nested_deeper_than
from api_gateway.errors import ApiError
from api_gateway.openai_types import ChatCompletionRequest, StreamOptions


def test_the_depth_scan_counts_levels_not_brackets_in_strings() -> None:
    assert not nested_deeper_than(b"[" * 3 + b"]" * 3, 3)
    assert nested_deeper_than(b"[" * 4 + b"]" * 4, 3)
    assert nested_deeper_than(b'{"a":{"b":[[1]]}}', 3)
    assert not nested_deeper_than(b'{"a":"[[[[[[","b":["]]]]\\"[[["]}', 3)  # brackets inside strings
    assert not nested_deeper_than(b"[[[[[[", 3)  # unbalanced: malformed, for the JSON decoder to report
    wide = json.dumps({"messages": [[{"a": [1]}] for _ in range(1000)]}).encode()  # many brackets, depth 5
    assert not nested_deeper_than(wide, 5)
    assert nested_deeper_than(wide, 4)


@pytest.mark.parametrize(
    ("body", "code", "message"),
    [
        (b'{"a": "\xff"}', "invalid_encoding", "not valid UTF-8 (invalid start byte at byte 7)"),
        (b"[" * 65 + b"]" * 65, "too_deep", "more than 64 levels deep"),
        (b'{"a": [1, }', "invalid_json", "not valid JSON"),
    ],
)
def test_bad_bodies_are_400(body: bytes, code: str, message: str) -> None:
    with pytest.raises(ApiError) as caught:
        decode_json_body(body)
    assert (caught.value.status, caught.value.code) == (400, code)
    assert message in caught.value.message


@pytest.mark.parametrize(
    ("body", "param", "literal"),
    [
        (b'{"model": "m", "temperature": NaN}', "temperature", "NaN"),
        (b'{"top_p": Infinity, "model": "m"}', "top_p", "Infinity"),
        (b'{"temperature": -Infinity}', "temperature", "-Infinity"),
        (b'{"temperature": 1e400}', "temperature", "1e400"),  # beyond a float: Python's parser reads inf
        (
            b'{"response_format": {"json_schema": {"schema": {"maximum": NaN}}}}',
            "response_format.json_schema.schema.maximum",
            "NaN",
        ),
        (
            b'{"messages": [{"role": "user", "content": "hi"}, {"role": "user", "content": [1, Infinity]}]}',
            "messages[1].content[1]",
            "Infinity",
        ),
    ],
)
def test_a_number_that_is_not_finite_is_400_naming_its_field(body: bytes, param: str, literal: str) -> None:
    with pytest.raises(ApiError) as caught:
        decode_json_body(body)
    assert (caught.value.status, caught.value.code, caught.value.param) == (400, "invalid_value", param)
    assert caught.value.message.startswith(f"invalid value for '{param}': {literal} is not a valid number")


def test_a_body_that_is_only_nan_names_the_body() -> None:
    with pytest.raises(ApiError) as caught:
        decode_json_body(b"NaN")
    assert (caught.value.code, caught.value.param) == ("invalid_value", None)
    assert (
        caught.value.message
        == "invalid value for the request body: NaN is not a valid number (JSON has no NaN or Infinity)"
    )


@pytest.mark.parametrize("body", [b'{"temperature": NaN, "x": [}', b'{"temperature": nan}', b'{"a": "NaN", "b": [1,]}'])
def test_a_body_malformed_otherwise_stays_invalid_json(body: bytes) -> None:
    with pytest.raises(ApiError) as caught:
        decode_json_body(body)
    assert (caught.value.code, caught.value.param) == ("invalid_json", None)


def test_a_body_within_the_bound_decodes() -> None:
    assert decode_json_body(b"[" * 64 + b"]" * 64) == json.loads("[" * 64 + "]" * 64)


def test_bodies_conform_strictly_but_whole_floats_are_ints() -> None:
    body = {"model": "m", "messages": [], "max_tokens": 5.0, "stream_options": {"include_usage": True}}
    assert conform(body, ChatCompletionRequest).max_tokens == 5
    assert decode_request(json.dumps(body).encode(), ChatCompletionRequest).max_tokens == 5
    with pytest.raises(ValidationException) as caught:
        conform({"include_usage": 0}, StreamOptions)  # Litestar alone would take 0 for false
    assert caught.value.extra == [{"message": "Expected `bool`, got `int`", "key": "include_usage", "source": "body"}]
    with pytest.raises(ValidationException) as top:
        conform({"model": "m"}, ChatCompletionRequest)
    assert top.value.extra == [{"message": "Object missing required field `messages`", "key": "data", "source": "body"}]
    with pytest.raises(ValidationException):
        conform({"model": "m", "messages": [], "max_tokens": "5"}, ChatCompletionRequest)


def test_a_body_is_decoded_once_into_its_type_with_the_types_bounds() -> None:
    body = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.5, "seed": 3}'
    request = decode_request(body, ChatCompletionRequest)
    assert isinstance(request, ChatCompletionRequest)
    assert (request.temperature, request.seed) == (0.5, 3)
    with pytest.raises(ApiError) as caught:
        decode_request(b'{"model": "m", "messages": [], "temperature": 2.5}', ChatCompletionRequest)
    assert (caught.value.code, caught.value.param) == ("invalid_value", "temperature")
    assert caught.value.message == "'temperature' must be between 0 and 2, got 2.5"
    with pytest.raises(ApiError) as top_p:
        decode_request(b'{"model": "m", "messages": [], "top_p": 0}', ChatCompletionRequest)
    assert top_p.value.message == "'top_p' must be in (0, 1], got 0"
    with pytest.raises(ApiError) as bad:
        decode_request(b'{"model": "m", "messages": [], "temperature": NaN}', ChatCompletionRequest)
    assert (bad.value.code, bad.value.param) == ("invalid_value", "temperature")
