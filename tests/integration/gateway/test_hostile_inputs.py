"""Hostile requests against the real stack (real NATS, router_svc, worker, tiny ONNX models):
each is a clean 4xx in the OpenAI error shape that names the problem, never a 5xx or a hang."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from api_gateway.body import MAX_DEPTH
from harness import Stack

CHAT = "/v1/chat/completions"
JSON = {"content-type": "application/json"}
USER = {"role": "user", "content": "hello"}

pytestmark = pytest.mark.asyncio(loop_scope="module")  # the stack's loop


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "billing", "messages": [USER], "max_tokens": 2, **fields}


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    """The error body, after checking the status and the OpenAI shape."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}
    error: dict[str, Any] = body["error"]
    assert {"message", "type", "param", "code"} <= set(error)
    assert error["type"] == "invalid_request_error"
    return error


async def post(stack: Stack, content: bytes) -> httpx.Response:
    async with stack.http() as http:
        return await http.post(CHAT, content=content, headers=JSON)


async def test_invalid_utf8_is_400(stack: Stack) -> None:
    body = json.dumps(chat()).encode().replace(b"hello", b"hel\xff\xfelo")
    error = error_of(await post(stack, body), 400)
    assert error["code"] == "invalid_encoding"
    assert "not valid UTF-8" in error["message"]
    # in a field the gateway does not read, too
    ignored = json.dumps(chat(metadata="x")).encode().replace(b'"x"', b'"\xc3\x28"')
    assert error_of(await post(stack, ignored), 400)["code"] == "invalid_encoding"


@pytest.mark.parametrize("where", ["body", "unknown_field", "messages"])
async def test_json_nested_1000_deep_is_400(stack: Stack, where: str) -> None:
    deep = "[" * 1000 + "]" * 1000
    text = {
        "body": deep,
        "unknown_field": json.dumps(chat(tools=0)).replace('"tools": 0', f'"tools": {deep}'),
        "messages": json.dumps(chat(messages=0)).replace('"messages": 0', f'"messages": {deep}'),
    }[where]
    error = error_of(await post(stack, text.encode()), 400)
    assert error["code"] == "too_deep"
    assert f"more than {MAX_DEPTH} levels deep" in error["message"]


@pytest.mark.parametrize("seed", [-1, 2**63, 10**30])
async def test_a_seed_out_of_range_is_400(stack: Stack, seed: int) -> None:
    async with stack.http() as http:
        error = error_of(await http.post(CHAT, json=chat(seed=seed)), 400)
    assert error["param"] == "seed"
    assert "'seed'" in error["message"]


async def test_the_largest_seed_is_served(stack: Stack) -> None:
    async with stack.http() as http:
        first = await http.post(CHAT, json=chat(seed=2**63 - 1, temperature=1.0))
        again = await http.post(CHAT, json=chat(seed=2**63 - 1, temperature=1.0))
    assert first.status_code == 200, first.text
    assert first.json()["choices"][0]["message"] == again.json()["choices"][0]["message"]


async def test_nul_bytes(stack: Stack) -> None:
    raw = json.dumps(chat()).encode().replace(b"hello", b"hel\x00lo")  # a raw NUL is not JSON
    error = error_of(await post(stack, raw), 400)
    assert error["code"] == "invalid_json"
    async with stack.http() as http:  # an escaped one is text like any other
        escaped = await http.post(CHAT, json=chat(messages=[{"role": "user", "content": "hel\x00lo\x00"}]))
        in_model = await http.post(CHAT, json=chat(model="bill\x00ing"))
    assert escaped.status_code == 200, escaped.text
    assert error_of(in_model, 404)["code"] == "model_not_found"


async def test_a_10mb_body_is_413(stack: Stack) -> None:
    body = json.dumps(chat(messages=[{"role": "user", "content": "x" * (10 * 1024 * 1024)}])).encode()
    error = error_of(await post(stack, body), 413)
    assert error["code"] == "request_too_large"
    assert f"limit of {stack.settings.max_body_bytes} bytes" in error["message"]


async def test_5000_messages_are_400(stack: Stack) -> None:
    async with stack.http() as http:
        response = await http.post(CHAT, json=chat(messages=[USER] * 5000))
    error = error_of(response, 400)
    assert (error["code"], error["param"]) == ("too_many_messages", "messages")
    assert f"'messages' holds 5000 messages; the limit is {stack.settings.max_messages}" == error["message"]


@pytest.mark.parametrize("model", ["billing", "router"])
async def test_a_prompt_beyond_the_context_window_is_400(stack: Stack, model: str) -> None:
    long = " ".join(["word"] * 2000)  # tiny-llama's window is 512 tokens
    async with stack.http() as http:
        response = await http.post(CHAT, json=chat(model=model, messages=[{"role": "user", "content": long}]))
    error = error_of(response, 400)
    assert error["code"] == "context_window_exceeded"
    assert "context window is 512 tokens" in error["message"]


@pytest.mark.parametrize("max_tokens", [100_000, 10**30])
async def test_a_huge_max_tokens_is_400(stack: Stack, max_tokens: int) -> None:
    async with stack.http() as http:
        error = error_of(await http.post(CHAT, json=chat(max_tokens=max_tokens)), 400)
    assert error["param"] == "max_tokens"
    assert f"must be between 1 and {stack.settings.max_tokens_limit}" in error["message"]


async def test_max_tokens_beyond_the_window_but_within_the_limit_is_400(stack: Stack) -> None:
    async with stack.http() as http:
        error = error_of(await http.post(CHAT, json=chat(max_tokens=16000)), 400)
    assert error["code"] == "context_window_exceeded"
    assert "lower max_tokens to at most" in error["message"]


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"[]", "invalid_type"),
        (b'"hello"', "invalid_type"),
        (b"null", "invalid_type"),
        (b'{"model": "billing", "messages": [], "temperature": 1e400}', "invalid_value"),  # beyond a float
        (b'{"model": "\\ud800", "messages": []}', "invalid_json"),  # a lone surrogate
        (b'{"model": "billing", "messages": [{"role": "user", "content": "x"}], "n": 1e3}', "invalid_value"),
    ],
)
async def test_odd_json_is_400(stack: Stack, body: bytes, code: str) -> None:
    assert error_of(await post(stack, body), 400)["code"] == code


NOT_FINITE = [
    ("temperature", b"NaN", "temperature"),
    ("temperature", b"Infinity", "temperature"),
    ("top_p", b"-Infinity", "top_p"),
    ("metadata", b'{"tags": [1, NaN]}', "metadata.tags[1]"),
]


@pytest.mark.parametrize(("field", "value", "param"), NOT_FINITE)
async def test_nan_or_infinity_is_400_naming_the_field_in_the_openai_shape(
    stack: Stack, field: str, value: bytes, param: str
) -> None:
    body = json.dumps(chat(**{field: "@"})).encode().replace(b'"@"', value)
    error = error_of(await post(stack, body), 400)
    assert (error["code"], error["param"]) == ("invalid_value", param)
    assert f"invalid value for '{param}': " in error["message"]
    assert "is not a valid number" in error["message"]


@pytest.mark.parametrize(("field", "value", "param"), NOT_FINITE)
async def test_nan_or_infinity_is_400_naming_the_field_in_the_anthropic_shape(
    stack: Stack, field: str, value: bytes, param: str
) -> None:
    fields = {"model": "billing", "max_tokens": 2, "messages": [USER], field: "@"}
    body = json.dumps(fields).encode().replace(b'"@"', value)
    async with stack.http() as http:
        response = await http.post("/v1/messages", content=body, headers=JSON)
    assert response.status_code == 400, response.text
    answer = response.json()
    assert (answer["type"], answer["error"]["type"]) == ("error", "invalid_request_error")
    assert answer["error"]["details"] == {"error_code": "invalid_value", "param": param}
    assert "is not a valid number" in answer["error"]["message"]
