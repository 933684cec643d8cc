"""The official ``openai`` client against the running gateway: router_svc and the real worker
with tiny real ONNX models behind it, over real NATS (one stack for the whole module)."""

from __future__ import annotations

import json

import msgspec
import openai
import pytest
from litestar import Litestar

from harness import ROUTER_HOST, Stack
from nrt.adapters.bus import subjects
from nrt.core.events import RequestAdmitted, RequestCompleted, RequestFailed, RequestRouted, SessionTouched
from nrt.core.protocol import GatewayHeartbeat

pytestmark = pytest.mark.asyncio(loop_scope="module")

BILLING = "I was charged twice for my order"  # billing's only example: confidence 1.0
TECHNICAL = "the app crashes when I open it"  # technical's (a standby specialist)
LEGAL = "send me the data processing agreement"  # an intent without a specialist
UNSURE = "what is the weather like on Mars"  # below the 0.999 threshold


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


async def test_routed_completion_shows_the_hop_and_fills_usage(stack: Stack) -> None:
    response = await stack.client().chat.completions.with_raw_response.create(model="router", messages=user(BILLING))
    completion = response.parse()
    request_id = response.headers["x-nrt-request-id"]
    message = completion.choices[0].message
    assert message.role == "assistant"
    assert message.content
    assert message.tool_calls is not None
    call = message.tool_calls[0]
    assert call.type == "function"
    assert call.function.name == "dispatch_to_specialist"
    assert json.loads(call.function.arguments) == {"intent": "billing", "target": "billing"}
    assert completion.model == "billing"
    assert completion.choices[0].finish_reason in ("stop", "length")
    assert completion.usage is not None
    assert completion.usage.completion_tokens == 8  # the manifest's generation default
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + 8
    nrt = response.http_response.json()["nrt"]
    assert nrt["request_id"] == request_id
    assert (nrt["entry_model"], nrt["final_model"], nrt["intent"], nrt["routed"]) == (
        "router",
        "billing",
        "billing",
        True,
    )
    assert nrt["confidence"] == pytest.approx(1.0, abs=1e-4)
    assert set(nrt["scores"]) == {"billing", "technical", "legal"}
    router, specialist = nrt["hops"]
    assert (router["role"], router["model"], router["worker_id"]) == ("router", "router", ROUTER_HOST)
    assert router["latency_ms"] >= router["compute_ms"] > 0
    assert (specialist["role"], specialist["model"], specialist["worker_id"]) == ("specialist", "billing", "w-gateway")
    assert 0 < specialist["ttft_ms"] <= specialist["latency_ms"]
    assert specialist["compute_ms"] > 0
    assert nrt["latency_ms"] >= nrt["ttft_ms"] > 0
    # three events: who asked, the router's decision and its dispatch (one fact), the outcome
    events = await stack.events(request_id, until=3)
    assert [type(e) for e in events] == [RequestAdmitted, RequestRouted, RequestCompleted]
    assert all(e.manifest_version == 1 for e in events)  # type: ignore[attr-defined]
    routed, completed = events[1], events[2]
    assert isinstance(routed, RequestRouted)
    assert (routed.model_id, routed.worker_id, routed.intent, routed.target) == (
        "router",
        ROUTER_HOST,
        "billing",
        "billing",
    )
    assert set(routed.scores) == {"billing", "technical", "legal"}
    assert routed.confidence == pytest.approx(1.0, abs=1e-4)
    assert routed.threshold == 0.999
    assert routed.latency_ms > 0
    assert routed.rule == nrt["rule"]
    assert isinstance(completed, RequestCompleted)
    assert (completed.model_id, completed.completion_tokens) == ("billing", 8)
    # the per-hop breakdown: each transit and each service's own work
    breakdown = nrt["breakdown"]
    for part in ("gateway_in_ms", "to_router_ms", "router_ms", "to_worker_ms", "worker_ms", "back_ms", "total_ms"):
        assert breakdown[part] >= 0, part
    assert breakdown["router_ms"] > 0
    assert breakdown["worker_ms"] >= specialist["compute_ms"] * 0.9  # the worker's own time holds its compute
    assert breakdown["total_ms"] >= breakdown["router_ms"] + breakdown["worker_ms"]


async def test_the_gateway_names_itself_on_what_it_admits_and_heartbeats_under_that_name(stack: Stack) -> None:
    app = stack.gateway.config.app
    assert isinstance(app, Litestar)
    gateway_id = app.state.cluster_link.gateway_id
    beats = await stack.nc.subscribe(subjects.GATEWAY_HEARTBEAT)
    try:
        heard = msgspec.json.decode((await beats.next_msg(timeout=5)).data, type=GatewayHeartbeat)
    finally:
        await beats.unsubscribe()
    assert heard.gateway_id == gateway_id
    response = await stack.client().chat.completions.with_raw_response.create(model="router", messages=user(BILLING))
    admitted = (await stack.events(response.headers["x-nrt-request-id"], until=1))[0]
    assert isinstance(admitted, RequestAdmitted)
    assert admitted.gateway_id == gateway_id  # cluster_state ends its requests once that gateway stops beating


async def test_streaming_sends_the_tool_call_first_then_tokens_then_done(stack: Stack) -> None:
    stream = await stack.client().chat.completions.create(
        model="router", messages=user(BILLING), stream=True, max_tokens=6
    )
    chunks = [chunk async for chunk in stream]
    first, last = chunks[0], chunks[-1]
    assert first.choices[0].delta.role == "assistant"
    assert first.choices[0].delta.tool_calls is not None
    tool = first.choices[0].delta.tool_calls[0]
    assert tool.function is not None
    assert tool.function.name == "dispatch_to_specialist"
    assert json.loads(tool.function.arguments or "") == {"intent": "billing", "target": "billing"}
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text
    assert last.choices[0].finish_reason == "length"
    assert last.usage is not None
    assert last.usage.completion_tokens == 6
    assert all(c.id == first.id and c.model == "billing" for c in chunks)
    extra = last.model_extra or {}
    assert extra["nrt"]["final_model"] == "billing"
    assert extra["nrt"]["hops"][1]["ttft_ms"] > 0


async def test_streaming_with_include_usage_and_the_raw_sse_frames(stack: Stack) -> None:
    body = {
        "model": "router",
        "messages": user(BILLING),
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 3,
    }
    async with stack.http() as http:
        response = await http.post("/v1/chat/completions", json=body)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    raw = response.content
    assert b"\r" not in raw
    events = raw.split(b"\n\n")
    assert events[-1] == b""
    assert events[-2] == b"data: [DONE]"
    usage_only = json.loads(events[-3].removeprefix(b"data: "))
    assert usage_only["choices"] == []
    assert usage_only["usage"]["completion_tokens"] == 3
    closing = json.loads(events[-4].removeprefix(b"data: "))
    assert closing["choices"][0]["finish_reason"] == "length"
    assert "usage" not in closing


@pytest.mark.parametrize(
    ("text", "intent", "why"),
    [(UNSURE, None, "below the threshold"), (LEGAL, "legal", "no specialist serves intent 'legal'")],
)
async def test_unsure_or_unserved_intents_go_to_the_fallback(
    stack: Stack, text: str, intent: str | None, why: str
) -> None:
    response = await stack.client().chat.completions.with_raw_response.create(model="router", messages=user(text))
    completion = response.parse()
    tool_calls = completion.choices[0].message.tool_calls
    assert tool_calls is not None
    assert json.loads(tool_calls[0].function.arguments) == {"intent": intent, "target": "fallback"}
    assert completion.model == "fallback"
    nrt = response.http_response.json()["nrt"]
    assert nrt["final_model"] == "fallback"
    assert why in nrt["rule"]
    events = await stack.events(response.headers["x-nrt-request-id"], until=3)
    routed = next(e for e in events if isinstance(e, RequestRouted))
    assert (routed.intent, routed.target) == (intent, "fallback")


async def test_a_standby_specialist_is_promoted_on_demand(stack: Stack) -> None:
    response = await stack.client().chat.completions.with_raw_response.create(model="router", messages=user(TECHNICAL))
    nrt = response.http_response.json()["nrt"]
    assert nrt["final_model"] == "technical"
    # technical was loaded standby; the first request promoted it (a cold start), later ones find it resident
    again = await stack.client().chat.completions.with_raw_response.create(model="router", messages=user(TECHNICAL))
    assert again.http_response.json()["nrt"]["hops"][1]["cold_start_ms"] is None


async def test_direct_calls_skip_classification(stack: Stack) -> None:
    response = await stack.client().chat.completions.with_raw_response.create(
        model="technical", messages=user(BILLING), max_tokens=4
    )
    completion = response.parse()
    assert completion.model == "technical"
    assert completion.choices[0].message.tool_calls is None
    assert completion.usage is not None
    assert completion.usage.completion_tokens == 4
    nrt = response.http_response.json()["nrt"]
    assert (nrt["routed"], nrt["intent"], nrt["rule"]) == (False, None, "direct")
    assert [h["role"] for h in nrt["hops"]] == ["specialist"]
    events = await stack.events(response.headers["x-nrt-request-id"], until=2)
    assert [type(e) for e in events] == [RequestAdmitted, RequestCompleted]  # nothing was decided: no RequestRouted
    admitted, completed = events
    assert isinstance(admitted, RequestAdmitted)
    assert isinstance(completed, RequestCompleted)
    assert (admitted.model_id, completed.model_id) == ("technical", "technical")
    stream = await stack.client().chat.completions.create(model="fallback", messages=user("hi"), stream=True)
    chunks = [c async for c in stream]
    assert chunks[0].choices[0].delta.tool_calls is None
    assert chunks[-1].choices[0].finish_reason is not None


async def test_a_session_id_reaches_the_worker_and_its_kv_is_reused(stack: Stack) -> None:
    client = stack.client()
    history = user("hello there")
    first = await client.chat.completions.create(
        model="fallback", messages=history, extra_headers={"X-NRT-Session": "conv-1"}, max_tokens=4
    )
    history += [{"role": "assistant", "content": first.choices[0].message.content or ""}, *user("and then?")]
    second = await client.chat.completions.with_raw_response.create(
        model="fallback", messages=history, extra_headers={"X-NRT-Session": "conv-1"}, max_tokens=4
    )
    assert second.http_response.json()["nrt"]["session_id"] == "conv-1"
    usage = second.parse().usage
    assert usage is not None
    assert usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens > 0  # turn 2 prefilled only its new tokens
    touched = [e for e in await stack.events(until=1) if isinstance(e, SessionTouched) and e.session_id == "conv-1"]
    assert touched
    assert touched[-1].model_id == "fallback"
    # the `user` field is the conversation id when no header is sent
    third = await client.chat.completions.with_raw_response.create(
        model="fallback", messages=user("hi"), user="alice", max_tokens=2
    )
    assert third.http_response.json()["nrt"]["session_id"] == "alice"


# -- bad input ------------------------------------------------------------------------------


async def test_bad_requests_get_clear_openai_errors(stack: Stack) -> None:
    client = stack.client()
    cases: list[tuple[dict[str, object], str, str | None]] = [
        ({"messages": []}, "'messages' must contain at least one message", "messages"),
        (
            {"messages": [{"role": "wizard", "content": "x"}]},
            "messages[0].role 'wizard' is not supported",
            "messages[0].role",
        ),
        ({"messages": user("x"), "max_tokens": 0}, "'max_tokens' must be between 1 and 16384, got 0", "max_tokens"),
        ({"messages": user("x"), "max_tokens": 100000}, "'max_tokens' must be between 1 and 16384", "max_tokens"),
        ({"messages": user("x"), "temperature": 9}, "'temperature' must be between 0 and 2", "temperature"),
    ]
    for fields, message, param in cases:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(model="router", **fields)  # type: ignore[call-overload]
        assert caught.value.status_code == 400
        assert message in caught.value.message
        body = caught.value.body
        assert isinstance(body, dict)
        assert body["param"] == param
        assert body["type"] == "invalid_request_error"


async def test_missing_messages_and_malformed_json(stack: Stack) -> None:
    async with stack.http() as http:
        missing = await http.post("/v1/chat/completions", json={"model": "router"})
        malformed = await http.post(
            "/v1/chat/completions",
            content=b'{"model": "router", "messages": [',
            headers={"content-type": "application/json"},
        )
        wrong_type = await http.post("/v1/chat/completions", json={"model": "router", "messages": "hi"})
        empty = await http.post("/v1/chat/completions", content=b"", headers={"content-type": "application/json"})
    assert missing.status_code == 400
    assert missing.json()["error"] == {
        "message": "missing required parameter 'messages'",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "missing_required_parameter",
        "problems": None,
    }
    assert malformed.status_code == 400
    assert malformed.json()["error"]["code"] == "invalid_json"
    assert "not valid JSON" in malformed.json()["error"]["message"]
    assert wrong_type.status_code == 400
    assert wrong_type.json()["error"]["param"] == "messages"
    assert "Expected `array`" in wrong_type.json()["error"]["message"]
    assert empty.status_code == 400
    assert "request body is empty" in empty.json()["error"]["message"]


async def test_unknown_model_is_404(stack: Stack) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        await stack.client().chat.completions.create(model="gpt-4o", messages=user("hi"))
    assert caught.value.code == "model_not_found"
    assert "'gpt-4o' does not exist in manifest v1; use 'router' to route" in caught.value.message


async def test_an_oversized_body_is_413(stack: Stack) -> None:
    with pytest.raises(openai.APIStatusError) as caught:
        await stack.client().chat.completions.create(model="router", messages=user("x" * (2 * 1024 * 1024)))
    assert caught.value.status_code == 413
    assert "larger than the limit of 1048576 bytes" in caught.value.message


@pytest.mark.parametrize("stream", [False, True])
async def test_a_prompt_beyond_the_context_window_is_400(stack: Stack, stream: bool) -> None:
    long = " ".join(["word"] * 2000)  # tiny-llama's context window is 512 tokens
    with pytest.raises(openai.BadRequestError) as caught:
        await stack.client().chat.completions.create(model="billing", messages=user(long), stream=stream)
    assert caught.value.code == "context_window_exceeded"
    assert "context window" in caught.value.message
    request_id = caught.value.response.headers["x-nrt-request-id"]
    events = await stack.events(request_id, until=2)  # admitted, failed (a direct call)
    failed = events[-1]
    assert isinstance(failed, RequestFailed)
    assert (failed.code, failed.status, failed.model_id, failed.manifest_version) == (
        "context_window_exceeded",
        400,
        "billing",
        1,
    )


# -- the other endpoints -------------------------------------------------------------------


async def test_models_list_every_model_with_tier_and_placement(stack: Stack) -> None:
    models = {m.id: m for m in (await stack.client().models.list()).data}
    assert set(models) == {"router", "billing", "technical", "fallback"}
    billing = models["billing"].model_extra or {}
    assert (billing["role"], billing["tier"], billing["routed"]) == ("specialist", "resident", False)
    assert billing["placements"] == [
        {"worker_id": "w-gateway", "tier": "resident", "bytes_held": billing["placements"][0]["bytes_held"]}
    ]
    assert billing["placements"][0]["bytes_held"] > 0
    router = models["router"].model_extra or {}
    assert router["routed"] is True
    assert [p["worker_id"] for p in router["placements"]] == [ROUTER_HOST]  # router_svc hosts the entry model
    assert models["router"].owned_by == "tiny-support"


async def test_cluster_manifest_health_readiness_and_openapi(stack: Stack) -> None:
    async with stack.http() as http:
        folded = await http.get("/v1/cluster")
        cluster = folded.json()
        manifest = (await http.get("/v1/manifest")).json()
        healthz = await http.get("/healthz")
        readyz = await http.get("/readyz")
        schema = (await http.get("/schema/openapi.json")).json()
        nowhere = await http.get("/v2/nothing")
    assert folded.headers["x-nrt-state-source"] == "gateway"  # this stack runs no cluster_state
    assert cluster["manifest_version"] == 1
    assert cluster["workers"]["w-gateway"]["alive"] is True
    assert cluster["models"]["billing"]["placements"]["w-gateway"]["tier"] == "resident"
    # router_svc is the entry model's worker: in the cluster as a worker with the router role
    assert (cluster["workers"][ROUTER_HOST]["role"], cluster["workers"]["w-gateway"]["role"]) == (
        "router",
        "specialist",
    )
    assert cluster["models"]["router"]["placements"][ROUTER_HOST]["tier"] == "resident"
    # the gateway follows the control plane only: request counts are cluster_state's to serve
    assert cluster["counters"]["requests_admitted"] == 0
    assert cluster["counters"]["manifests_applied"] == 1
    assert manifest["version"] == 1
    assert manifest["cluster"] == "tiny-support"
    assert manifest["text"] == stack.manifest.text
    assert healthz.json() == {"status": "ok"}
    assert readyz.status_code == 200
    assert readyz.json() == {
        "status": "ready",
        "checks": {"nats": "ok", "router": "ok", "manifest": "ok", "models": "ok"},
    }
    chat = schema["paths"]["/v1/chat/completions"]["post"]
    assert "ChatCompletionRequest" in json.dumps(chat["requestBody"])
    assert {"/v1/models", "/v1/cluster", "/v1/manifest", "/health", "/healthz", "/readyz"} <= set(schema["paths"])
    assert nowhere.status_code == 404
    assert nowhere.json()["error"]["code"] == "not_found"


async def test_manifest_updates_need_the_admin_key_and_a_valid_manifest(stack: Stack) -> None:
    text = stack.manifest.text
    async with stack.http(api_key=None) as http:
        anonymous = await http.put("/v1/manifest", content=text)
    async with stack.http() as http:  # the infer key
        infer = await http.put("/v1/manifest", content=text)
        wrong = await http.put("/v1/manifest", content=text, headers={"Authorization": "Bearer nope"})
        admin = {"Authorization": "Bearer test-admin-key", "Content-Type": "application/yaml"}
        invalid = await http.put("/v1/manifest", content=text.replace("tier: standby", "tier: hot"), headers=admin)
        valid = await http.put("/v1/manifest", content=text, headers=admin)
    assert anonymous.status_code == 401
    assert anonymous.headers["www-authenticate"] == "Bearer"
    assert wrong.status_code == 401
    assert (infer.status_code, infer.json()["error"]["code"]) == (403, "insufficient_scope")
    assert infer.json()["error"]["type"] == "permission_error"
    assert invalid.status_code == 422
    error = invalid.json()["error"]
    assert error["code"] == "invalid_manifest"
    assert error["param"] == "models.specialists[1].tier"
    assert "unknown tier 'hot'" in error["problems"][0]
    assert "PUT /v1/manifest:" in error["problems"][0]
    # a valid manifest goes to cluster_state, which is not running in this stack: a clear 503, not a hang
    assert valid.status_code == 503
    assert valid.json()["error"]["code"] == "no_responders"
    assert "nrt.manifest.apply" in valid.json()["error"]["message"]


async def test_readiness_and_errors_for_bad_methods(stack: Stack) -> None:
    async with stack.http() as http:
        response = await http.get("/v1/chat/completions")
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"
