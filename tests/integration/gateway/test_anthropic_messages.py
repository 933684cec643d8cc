"""The official ``anthropic`` client against ``POST /v1/messages``: router_svc and the real worker
with tiny real ONNX models behind it, over real NATS (one stack for the whole module)."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import pytest

from harness import API_KEY, Stack
from nrt.core.events import RequestAdmitted, RequestCompleted

pytestmark = pytest.mark.asyncio(loop_scope="module")

BILLING = "I was charged twice for my order"  # billing's only example: confidence 1.0


def client(stack: Stack, api_key: str = API_KEY) -> anthropic.AsyncAnthropic:
    """The Anthropic client as a user would make it: the key goes as ``x-api-key``."""
    return anthropic.AsyncAnthropic(base_url=stack.base_url, api_key=api_key, max_retries=0)


def user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


async def test_a_routed_message_shows_the_hop_as_a_tool_use_block(stack: Stack) -> None:
    response = await client(stack).messages.with_raw_response.create(
        model="router", max_tokens=8, messages=user(BILLING)
    )
    message = await response.parse()
    request_id = response.headers["x-nrt-request-id"]
    assert message.id == f"msg_{request_id}"
    assert (message.type, message.role, message.model) == ("message", "assistant", "billing")
    hop, text = message.content
    assert hop.type == "tool_use"
    assert hop.name == "dispatch_to_specialist"
    assert hop.input == {"intent": "billing", "target": "billing"}
    assert hop.id.startswith("toolu_")
    assert text.type == "text"
    assert text.text
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert message.usage.output_tokens <= 8
    assert message.usage.input_tokens > 0
    assert (message.model_extra or {})["nrt"]["intent"] == "billing"
    # the same request path as the OpenAI endpoint: admitted, routed, completed, charged to the key
    events = await stack.events(request_id, until=3)
    admitted, completed = events[0], events[-1]
    assert isinstance(admitted, RequestAdmitted)
    assert isinstance(completed, RequestCompleted)
    assert admitted.key_id is not None
    assert completed.key_id == admitted.key_id
    assert (completed.model_id, completed.completion_tokens) == ("billing", message.usage.output_tokens)


async def test_a_direct_message_has_only_text_and_takes_the_system_field(stack: Stack) -> None:
    anthropic_client = client(stack)
    plain = await anthropic_client.messages.create(model="billing", max_tokens=4, messages=user("hello"))
    assert [block.type for block in plain.content] == ["text"]
    assert plain.model == "billing"
    assert plain.stop_reason == "max_tokens"  # a random tiny model: it runs to the limit
    assert plain.usage.output_tokens == 4
    system = "You answer billing questions for ACME in one short sentence."
    with_system = await anthropic_client.messages.create(
        model="fallback", max_tokens=4, system=system, messages=user("hello")
    )
    as_blocks = await anthropic_client.messages.create(
        model="fallback",
        max_tokens=4,
        system=[{"type": "text", "text": system}],
        messages=[{"role": "user", "content": [{"type": "text", "text": "hello"}]}],
    )
    again = await anthropic_client.messages.create(
        model="fallback", max_tokens=4, system=system, messages=user("hello")
    )
    without = await anthropic_client.messages.create(model="fallback", max_tokens=4, messages=user("hello"))
    prompt = [
        m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0) for m in (without, with_system, as_blocks, again)
    ]
    assert prompt[1] > prompt[0]  # the system prompt reached the model
    assert prompt[3] == prompt[2] == prompt[1]
    # the same prompt a third time: the second stored what the first two share, the third reuses its KV
    assert (again.usage.cache_read_input_tokens or 0) > 0


async def test_a_routed_stream_sends_anthropics_event_sequence(stack: Stack) -> None:
    stream = await client(stack).messages.create(model="router", max_tokens=5, messages=user(BILLING), stream=True)
    events = [event async for event in stream]
    kinds = [event.type for event in events]
    assert kinds[:5] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
    ]
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(kinds[5:-3]) == {"content_block_delta"}
    start, hop_start, hop_input, hop_stop, text_start = events[:5]
    assert start.type == "message_start"
    assert start.message.model == "billing"
    assert start.message.content == []
    assert hop_start.type == "content_block_start"
    assert hop_start.index == 0
    assert hop_start.content_block.type == "tool_use"
    assert hop_start.content_block.name == "dispatch_to_specialist"
    assert hop_input.type == "content_block_delta"
    assert hop_input.delta.type == "input_json_delta"
    assert json.loads(hop_input.delta.partial_json) == {"intent": "billing", "target": "billing"}
    assert hop_stop.type == "content_block_stop"
    assert hop_stop.index == 0
    assert text_start.type == "content_block_start"
    assert text_start.index == 1
    deltas = [e.delta for e in events[5:-3] if e.type == "content_block_delta"]
    assert all(delta.type == "text_delta" for delta in deltas)
    assert deltas
    delta = events[-2]
    assert delta.type == "message_delta"
    assert delta.delta.stop_reason == "max_tokens"
    assert delta.usage.output_tokens == 5
    assert delta.usage.input_tokens is not None
    assert delta.usage.input_tokens > 0


async def test_the_stream_helper_assembles_routed_and_direct_messages(stack: Stack) -> None:
    async with client(stack).messages.stream(model="router", max_tokens=5, messages=user(BILLING)) as stream:
        texts = [text async for text in stream.text_stream]
        routed = await stream.get_final_message()
    hop, text = routed.content
    assert hop.type == "tool_use"
    assert hop.input == {"intent": "billing", "target": "billing"}
    assert text.type == "text"
    assert text.text == "".join(texts)
    assert routed.stop_reason == "max_tokens"
    assert (routed.usage.output_tokens, routed.model) == (5, "billing")
    async with client(stack).messages.stream(model="technical", max_tokens=3, messages=user("hi")) as stream:
        direct = await stream.get_final_message()
    assert [block.type for block in direct.content] == ["text"]
    assert (direct.usage.output_tokens, direct.model, direct.stop_reason) == (3, "technical", "max_tokens")


@pytest.mark.parametrize("stream", [False, True])
async def test_a_client_stop_sequence_ends_the_text_and_is_named(stack: Stack, stream: bool) -> None:
    anthropic_client = client(stack)
    greedy = await anthropic_client.messages.create(
        model="billing", max_tokens=12, extra_body={"temperature": 0.0}, messages=user("hello")
    )
    full = greedy.content[0].text if greedy.content[0].type == "text" else ""
    assert len(full) >= 6, full
    stop = full[3:6]
    expected = full[: full.find(stop)]
    message: anthropic.types.Message
    if stream:
        async with anthropic_client.messages.stream(
            model="billing",
            max_tokens=12,
            extra_body={"temperature": 0.0},
            stop_sequences=[stop],
            messages=user("hello"),
        ) as events:
            message = await events.get_final_message()
    else:
        message = await anthropic_client.messages.create(
            model="billing",
            max_tokens=12,
            extra_body={"temperature": 0.0},
            stop_sequences=[stop],
            messages=user("hello"),
        )
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", stop)
    assert message.content[0].type == "text"
    assert message.content[0].text == expected


async def test_top_k_and_metadata_user_id_reach_the_worker(stack: Stack) -> None:
    anthropic_client = client(stack)
    greedy = await anthropic_client.messages.create(
        model="billing", max_tokens=6, extra_body={"temperature": 0.0}, messages=user("hello")
    )
    top_1 = await anthropic_client.messages.create(
        model="billing", max_tokens=6, extra_body={"temperature": 1.0, "top_k": 1}, messages=user("hello")
    )
    assert top_1.content == greedy.content  # hot sampling from the single most likely token: greedy
    response = await anthropic_client.messages.with_raw_response.create(
        model="billing", max_tokens=2, metadata={"user_id": "conv-anthropic-1"}, messages=user("hello")
    )
    assert ((await response.parse()).model_extra or {})["nrt"]["session_id"] == "conv-anthropic-1"
    admitted = (await stack.events(response.headers["x-nrt-request-id"], until=1))[0]
    assert isinstance(admitted, RequestAdmitted)
    assert admitted.session_id == "conv-anthropic-1"


SAMPLING = ("temperature", "top_p", "top_k")  # recent SDKs send these only as extra_body

# The bad inputs of the OpenAI tests (test_validate, test_chat_e2e), as Anthropic requests.
BAD: list[tuple[dict[str, Any], str, str]] = [
    ({"messages": []}, "messages", "at least one message"),
    ({"messages": [{"role": "assistant", "content": "x"}]}, "messages", "role 'user'"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role", "'tool' is not supported"),
    ({"messages": [{"role": "system", "content": "x"}]}, "messages[0].role", "top-level 'system' field"),
    (
        {"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "base64"}}]}]},
        "messages[0].content[0].type",
        "'image' block; only 'text' blocks",
    ),
    (
        {
            "messages": [
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "x"}]},
            ]
        },
        "messages[1].content[0].type",
        "'tool_result' block",
    ),
    ({"system": [{"type": "image"}]}, "system[0].type", "only 'text' blocks"),
    ({"max_tokens": 0}, "max_tokens", "between 1 and 16384, got 0"),
    ({"max_tokens": 16385}, "max_tokens", "between 1 and 16384, got 16385"),
    ({"temperature": 1.5}, "temperature", "between 0 and 1"),
    ({"top_p": 0.0}, "top_p", "(0, 1]"),
    ({"top_k": 0}, "top_k", "at least 1"),
    ({"stop_sequences": ["a", "b", "c", "d", "e"]}, "stop_sequences", "up to 4"),
    ({"stop_sequences": [""]}, "stop_sequences", "non-empty"),
    ({"model": ""}, "model", "must name a model"),
    ({"metadata": {"user_id": "bad id with spaces"}}, "metadata.user_id", "1-128 characters"),
    (
        {"tools": [{"name": "bash", "type": "bash_20250124", "input_schema": {"type": "object"}}]},
        "tools[0].type",
        "runs no server tools",
    ),
]


@pytest.mark.parametrize(("fields", "param", "message"), BAD)
async def test_bad_inputs_are_anthropic_bad_request_errors(
    stack: Stack, fields: dict[str, Any], param: str, message: str
) -> None:
    request: dict[str, Any] = {"model": "router", "max_tokens": 8, "messages": user("hello"), **fields}
    sampling = {name: request.pop(name) for name in SAMPLING if name in request}  # no longer typed by the SDK
    with pytest.raises(anthropic.BadRequestError) as caught:
        await client(stack).messages.create(**request, extra_body=sampling)
    error = caught.value
    assert error.status_code == 400
    assert error.type == "invalid_request_error"
    assert error.api_message is not None
    assert message in error.api_message
    assert isinstance(error.body, dict)
    assert error.body["type"] == "error"
    assert error.body["error"]["details"]["param"] == param


async def test_an_unknown_model_is_a_not_found_error(stack: Stack) -> None:
    with pytest.raises(anthropic.NotFoundError) as caught:
        await client(stack).messages.create(model="claude-sonnet-4", max_tokens=8, messages=user("hi"))
    assert caught.value.type == "not_found_error"
    assert caught.value.error_code == "model_not_found"
    assert caught.value.api_message is not None
    assert "'claude-sonnet-4' does not exist" in caught.value.api_message


async def test_keys_are_checked_and_refusals_are_anthropic_errors(stack: Stack) -> None:
    with pytest.raises(anthropic.AuthenticationError) as caught:
        await client(stack, api_key="not-a-key").messages.create(model="router", max_tokens=8, messages=user("hi"))
    assert caught.value.type == "authentication_error"
    assert caught.value.error_code == "invalid_api_key"
    async with stack.http(api_key=None) as http:
        missing = await http.post("/v1/messages", json={"model": "router", "max_tokens": 8, "messages": user("hi")})
        bearer = await http.post(
            "/v1/messages",
            json={"model": "billing", "max_tokens": 1, "messages": user("hi")},
            headers={"Authorization": f"Bearer {API_KEY}"},
        )
    assert missing.status_code == 401
    assert missing.json()["type"] == "error"
    assert missing.json()["error"]["type"] == "authentication_error"
    assert "no API key" in missing.json()["error"]["message"]
    assert bearer.status_code == 200
    assert bearer.json()["type"] == "message"


async def test_bodies_that_do_not_decode_are_anthropic_errors(stack: Stack) -> None:
    async with stack.http(api_key=None) as http:
        headers = {"x-api-key": API_KEY, "content-type": "application/json"}
        missing = await http.post("/v1/messages", json={"model": "router", "messages": user("hi")}, headers=headers)
        malformed = await http.post("/v1/messages", content=b'{"model": "router",', headers=headers)
        wrong_type = await http.post(
            "/v1/messages", json={"model": "router", "max_tokens": "many", "messages": []}, headers=headers
        )
        empty = await http.post("/v1/messages", content=b"", headers=headers)
    for response in (missing, malformed, wrong_type, empty):
        assert response.status_code == 400, response.text
        assert response.json()["type"] == "error"
        assert response.json()["error"]["type"] == "invalid_request_error"
    assert "missing required parameter 'max_tokens'" in missing.json()["error"]["message"]
    assert "not valid JSON" in malformed.json()["error"]["message"]
    assert "max_tokens" in wrong_type.json()["error"]["message"]
    assert empty.json()["error"]["details"]["error_code"] == "empty_body"


async def test_the_raw_stream_has_event_lines_and_a_prompt_too_long_is_400(stack: Stack) -> None:
    body = {"model": "billing", "max_tokens": 2, "messages": user("hi"), "stream": True}
    async with stack.http() as http:
        response = await http.post("/v1/messages", json=body)
        too_long = await http.post(
            "/v1/messages", json={**body, "messages": user(" ".join(["word"] * 2000))}, headers={"x-api-key": API_KEY}
        )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    frames = [frame for frame in response.content.split(b"\n\n") if frame]
    for frame in frames:
        event, data = frame.split(b"\n")
        kind = event.removeprefix(b"event: ").decode()
        assert json.loads(data.removeprefix(b"data: "))["type"] == kind
    assert frames[-1] == b'event: message_stop\ndata: {"type":"message_stop"}'
    assert too_long.status_code == 400
    assert too_long.json()["type"] == "error"
    assert too_long.json()["error"]["details"]["error_code"] == "context_window_exceeded"
