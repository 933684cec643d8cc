"""API keys on the real services: the gateway refuses a missing, wrong or revoked key, serves a right one,
holds each key to its scope and limits, and records usage per key in the event log.

These share the module's stack (no database: the harness records its keys as cluster_state
records the keys given at start); test_api_keys_admin.py runs cluster_state, which records the
keys that ``POST /v1/keys`` makes.
"""

from __future__ import annotations

import re

import httpx
import openai
import pytest
from litestar import Litestar

from harness import ADMIN_KEY, API_KEY, Stack
from nrt.core.api_keys import key_id_of, key_sha256
from nrt.core.events import RequestAdmitted, RequestCompleted

BILLING = "I was charged twice for my order"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def v1_routes(stack: Stack) -> list[tuple[str, str]]:
    """(method, path) of every ``/v1`` route the gateway serves, path parameters filled in."""
    app = stack.gateway.config.app
    assert isinstance(app, Litestar)
    found = []
    for route in app.routes:
        if route.path.startswith("/v1"):
            path = re.sub(r"\{[^}]+\}", "abc123", route.path)
            found += [(method, path) for method in sorted(route.methods) if method not in ("HEAD", "OPTIONS")]
    return found


def assert_unauthorized(response: httpx.Response) -> None:
    assert response.status_code == 401, response.text
    assert response.headers["www-authenticate"] == "Bearer"
    body = response.json()
    if response.request.url.path == "/v1/messages":  # the Anthropic API: its error shape
        assert body["type"] == "error"
        error = body["error"]
        assert (error["type"], error["details"]["error_code"]) == ("authentication_error", "invalid_api_key")
        assert error["message"]
        return
    error = body["error"]
    assert (error["type"], error["code"]) == ("authentication_error", "invalid_api_key")
    assert set(error) >= {"message", "type", "param", "code"}


# -- the module's stack ----------------------------------------------------------------------


@pytest.mark.asyncio(loop_scope="module")
async def test_every_v1_route_refuses_a_request_without_a_key_or_with_a_wrong_one(stack: Stack) -> None:
    routes = v1_routes(stack)
    assert ("POST", "/v1/chat/completions") in routes
    assert ("POST", "/v1/messages") in routes
    assert ("DELETE", "/v1/keys/abc123") in routes
    async with stack.http(api_key=None) as http:
        for method, path in routes:
            assert_unauthorized(await http.request(method, path))
            assert_unauthorized(await http.request(method, path, headers={"Authorization": "Bearer nrt-wrong"}))
            assert_unauthorized(await http.request(method, path, headers={"x-api-key": "nrt-wrong"}))
            assert_unauthorized(await http.request(method, path, headers={"Authorization": f"Basic {API_KEY}"}))
        # health and the schemas stay open
        for path in ("/health", "/healthz", "/readyz", "/schema/openapi.json", "/schema/asyncapi.json"):
            assert (await http.get(path)).status_code == 200, path
        assert (await http.get("/health")).content == b""  # vLLM's liveness answer, which load generators probe


@pytest.mark.asyncio(loop_scope="module")
async def test_the_openai_client_is_refused_with_a_wrong_key_and_served_with_the_right_one(stack: Stack) -> None:
    with pytest.raises(openai.AuthenticationError) as refused:
        await stack.client(api_key="nrt-not-a-key").chat.completions.create(model="router", messages=user(BILLING))
    assert refused.value.status_code == 401
    assert refused.value.code == "invalid_api_key"
    client = stack.client()  # the infer key
    answer = await client.chat.completions.create(model="router", messages=user(BILLING), max_tokens=4)
    assert answer.choices[0].message is not None
    stream = await client.chat.completions.create(model="router", messages=user(BILLING), max_tokens=4, stream=True)
    chunks = [chunk async for chunk in stream]
    assert chunks
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    assert [m.id for m in (await client.models.list()).data]
    # the admin key may infer too; the x-api-key header is accepted as well
    assert (await stack.client(api_key=ADMIN_KEY).models.list()).data
    async with stack.http(api_key=None) as http:
        assert (await http.get("/v1/models", headers={"x-api-key": API_KEY})).status_code == 200


@pytest.mark.asyncio(loop_scope="module")
async def test_an_infer_key_may_not_administer(stack: Stack) -> None:
    async with stack.http() as http:
        responses = [
            await http.put("/v1/manifest", content=stack.manifest.text),
            await http.post("/v1/keys", json={"name": "mine"}),
            await http.get("/v1/keys"),
            await http.delete(f"/v1/keys/{key_id_of(key_sha256(ADMIN_KEY))}"),
        ]
        cluster = (await http.get("/v1/cluster")).json()
        as_admin = (await http.get("/v1/cluster", headers={"Authorization": f"Bearer {ADMIN_KEY}"})).json()
    for response in responses:
        assert response.status_code == 403, response.text
        error = response.json()["error"]
        assert (error["type"], error["code"]) == ("permission_error", "insufficient_scope")
        assert "admin" in error["message"]
    assert cluster["api_keys"] == {}  # the keys' hashes and usage are for admins
    assert set(as_admin["api_keys"]) == {key_id_of(key_sha256(k)) for k in (API_KEY, ADMIN_KEY)}


@pytest.mark.asyncio(loop_scope="module")
async def test_requests_record_the_key_that_sent_them(stack: Stack) -> None:
    response = await stack.client().chat.completions.with_raw_response.create(
        model="router", messages=user(BILLING), max_tokens=3
    )
    request_id = response.headers["x-nrt-request-id"]
    events = await stack.events(request_id, until=3)
    admitted = next(e for e in events if isinstance(e, RequestAdmitted))
    completed = next(e for e in events if isinstance(e, RequestCompleted))
    assert admitted.key_id == completed.key_id == key_id_of(key_sha256(API_KEY))
    assert completed.prompt_tokens > 0
    assert completed.completion_tokens > 0
