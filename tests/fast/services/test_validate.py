"""Request validation (pure): every bad input is a 4xx with a clear message and the parameter."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from api_gateway.body import decode_request
from api_gateway.errors import ApiError
from api_gateway.openai_types import ChatCompletionRequest
from api_gateway.validate import check_model, validate_chat
from harness import FIXTURES
from nrt.core.manifest import parse_manifest
from nrt.core.protocol import ChatMessage

MANIFEST = parse_manifest((FIXTURES / "tiny-support.yaml").read_text())
USER = {"role": "user", "content": "hello"}


def chat(**fields: Any) -> ChatCompletionRequest:
    """The request as the gateway decodes a body: once, into its type, with the type's bounds."""
    body = {"model": "router", "messages": [USER], **fields}
    return decode_request(msgspec.json.encode(body), ChatCompletionRequest)


def rejected(request: ChatCompletionRequest, header: str | None = None) -> ApiError:
    with pytest.raises(ApiError) as caught:
        validate_chat(request, header, max_tokens_limit=1000, max_messages=8)
    assert caught.value.status == 400
    return caught.value


def test_a_valid_request() -> None:
    call = validate_chat(
        chat(
            messages=[
                {"role": "developer", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                {"role": "assistant", "content": None},
                USER,
            ],
            max_completion_tokens=5,
            temperature=0.5,
            stop="\n",
            seed=3,
            stream=True,
            stream_options={"include_usage": True},
            user="alice",
        ),
        None,
        1000,
        8,
    )
    assert call.messages == (
        ChatMessage("system", "be brief"),
        ChatMessage("user", "a\nb"),
        ChatMessage("assistant", ""),
        ChatMessage("user", "hello"),
    )
    assert (call.params.max_tokens, call.params.temperature, call.params.stop, call.params.seed) == (5, 0.5, ("\n",), 3)
    assert call.stream
    assert call.include_usage
    assert call.session_id == "alice"


def test_a_messages_name_is_said_with_its_turn_and_checked() -> None:
    named = chat(
        messages=[
            {"role": "system", "content": "be brief", "name": "rules"},
            {"role": "user", "content": "hello", "name": "alice"},
            {"role": "assistant", "content": "hi", "name": "bot-1"},
            {"role": "user", "content": "and you?", "name": "bob"},
        ]
    )
    assert validate_chat(named, None, 1000, 8).messages == (
        ChatMessage("system", "rules: be brief"),
        ChatMessage("user", "alice: hello"),
        ChatMessage("assistant", "bot-1: hi"),
        ChatMessage("user", "bob: and you?"),
    )
    bad = rejected(chat(messages=[{"role": "user", "content": "hello", "name": "alice smith"}]))
    assert bad.param == "messages[0].name"
    assert "alice smith" in bad.message


def test_the_session_header_wins_over_user() -> None:
    assert validate_chat(chat(user="alice"), "conv-42", 1000, 8).session_id == "conv-42"
    assert validate_chat(chat(), None, 1000, 8).session_id is None
    assert rejected(chat(), "bad id with spaces").param == "X-NRT-Session"
    assert rejected(chat(user="alice\n")).param == "user"  # the whole value must match, no trailing newline


@pytest.mark.parametrize(
    ("fields", "param", "message"),
    [
        ({"messages": []}, "messages", "at least one message"),
        ({"messages": [USER] * 9}, "messages", "'messages' holds 9 messages; the limit is 8"),
        ({"messages": [{"role": "system", "content": "x"}]}, "messages", "role 'user'"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role", "'robot' is not supported"),
        (
            {"messages": [{"role": "user", "content": "x"}, {"role": "tool", "content": "x"}]},
            "messages[1].tool_call_id",
            "is missing",
        ),
        ({"messages": [{"role": "user"}]}, "messages[0].content", "is missing"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
            "messages[0].content[0].type",
            "only 'text' parts",
        ),
        ({"max_tokens": 0}, "max_tokens", "between 1 and 1000, got 0"),
        ({"max_tokens": 1001}, "max_tokens", "between 1 and 1000, got 1001"),
        ({"max_completion_tokens": -1}, "max_completion_tokens", "between 1 and 1000"),
        ({"max_tokens": 0, "max_completion_tokens": 5}, "max_tokens", "between 1 and 1000, got 0"),
        ({"seed": -1}, "seed", "'seed' must be between 0 and 9223372036854775807, got -1"),
        ({"seed": 2**63}, "seed", "between 0 and 9223372036854775807"),
        ({"temperature": 3.0}, "temperature", "between 0 and 2"),
        ({"top_p": 0.0}, "top_p", "(0, 1]"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop", "up to 4"),
        ({"n": 2}, "n", "must be 1"),
        ({"tools": [{"type": "function", "function": {"name": "f g"}}]}, "tools[0].name", "1-64 letters"),
        ({"tools": [{"type": "custom"}]}, "tools[0].type", "valid type: 'function'"),
        ({"tool_choice": "required"}, "tool_choice", "declares no 'tools'"),
        ({"tool_choice": "sometimes"}, "tool_choice", "valid: 'auto', 'none', 'required'"),
        (
            {"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function"}},
            "tool_choice.function",
            "missing",
        ),
        (
            {
                "tools": [{"type": "function", "function": {"name": "f"}}],
                "tool_choice": {"type": "function", "function": {"name": "g"}},
            },
            "tool_choice",
            "does not declare; declared: 'f'",
        ),
        ({"functions": [{"name": "f"}]}, "functions", "'functions' is not supported"),
        ({"model": ""}, "model", "must name a model"),
    ],
)
def test_bad_inputs(fields: dict[str, Any], param: str, message: str) -> None:
    with pytest.raises(ApiError) as caught:  # at decoding (the types' bounds) or in validate_chat
        validate_chat(chat(**fields), None, max_tokens_limit=1000, max_messages=8)
    error = caught.value
    assert error.status == 400
    assert error.param == param
    assert message in error.message
    body = msgspec.to_builtins(error.body())
    assert body["error"]["type"] == "invalid_request_error"
    assert set(body["error"]) >= {"message", "type", "param", "code"}


def test_unknown_models_are_404_and_name_the_valid_ones() -> None:
    assert check_model(MANIFEST, 1, "router") == "routed"
    assert check_model(MANIFEST, 1, "billing") == "direct"
    with pytest.raises(ApiError) as caught:
        check_model(MANIFEST, 1, "gpt-4o")
    assert caught.value.status == 404
    assert caught.value.code == "model_not_found"
    assert "'gpt-4o' does not exist in manifest v1" in caught.value.message
    assert "'billing'" in caught.value.message
