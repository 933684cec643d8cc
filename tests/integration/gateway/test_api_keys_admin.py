"""API keys made, limited and revoked through the API, on the real services with cluster_state on PostgreSQL.

``POST /v1/keys`` makes a key and cluster_state records its hash (``ApiKeyCreated``); the key
works at once, its usage is recorded with its id, its limits give 429 with ``Retry-After``,
and once revoked (``ApiKeyRevoked``) it is refused.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import openai
import pytest

from cluster_state.key_registry import bootstrap_keys
from harness import ADMIN_KEY, KEYS, start_stack
from nrt.adapters.store import EventStore
from nrt.core.api_keys import key_id_of, key_sha256
from nrt.core.events import ApiKeyCreated, ApiKeyRevoked, RequestCompleted

BILLING = "I was charged twice for my order"


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


async def until(condition: Callable[[], Awaitable[Any]], within: float = 10.0) -> Any:
    deadline = time.monotonic() + within
    while not (result := await condition()):
        assert time.monotonic() < deadline, "the condition did not hold in time"
        await asyncio.sleep(0.05)
    return result


async def test_keys_are_created_used_listed_and_revoked_through_the_api(
    nats_url: str, nrt_home: object, database_url: str, event_store: EventStore
) -> None:
    async with start_stack(nats_url, "tiny-support.yaml", database_url=database_url) as stack:
        async with stack.http(api_key=ADMIN_KEY) as admin:
            created = await admin.post("/v1/keys", json={"name": "ci", "scope": "infer"})
            assert created.status_code == 201, created.text
            key = created.json()
            assert key["key"].startswith("nrt-")
            assert key["key_id"] == key_id_of(key_sha256(key["key"]))
            assert (key["name"], key["scope"], key["rps"], key["revoked_at"]) == ("ci", "infer", None, None)
            assert key["created_by"] == key_id_of(key_sha256(ADMIN_KEY))

            # it works at once, with the official client, streaming and not
            client = stack.client(api_key=key["key"])
            answer = await client.chat.completions.with_raw_response.create(
                model="router", messages=user(BILLING), max_tokens=3
            )
            stream = await client.chat.completions.create(
                model="router", messages=user(BILLING), max_tokens=3, stream=True
            )
            assert [chunk async for chunk in stream]

            # the log holds its hash, never the key; the request's usage is recorded with its id
            recorded = [r.event for r in await event_store.query(types=("ApiKeyCreated",))]
            assert {e.key_id for e in recorded if isinstance(e, ApiKeyCreated)} == {
                key["key_id"],
                *(key_id_of(key_sha256(k)) for k in KEYS.values()),
            }
            rows = await event_store.query(stream_id=f"key:{key['key_id']}")
            assert key["key"] not in str(rows)
            assert key_sha256(key["key"]) in str(rows)
            request_id = answer.headers["x-nrt-request-id"]

            async def completed() -> list[Any]:
                rows = await event_store.query(stream_id=f"request:{request_id}")
                return [r.event for r in rows if isinstance(r.event, RequestCompleted)]

            (done,) = await until(completed)
            assert done.key_id == key["key_id"]

            async def listed() -> dict[str, Any] | None:
                keys = {k["key_id"]: k for k in (await admin.get("/v1/keys")).json()["data"]}
                ours = keys[key["key_id"]]
                return ours if ours["usage"]["completed"] >= 2 else None

            ours = await until(listed)
            assert ours["usage"]["requests"] >= 2
            assert ours["usage"]["completion_tokens"] > 0
            assert "key" not in ours
            assert "key_sha256" not in ours

            # revoked: refused from the next request on; the revocation is in the log
            revoked = await admin.delete(f"/v1/keys/{key['key_id']}")
            assert revoked.status_code == 200
            assert revoked.json()["revoked_at"] is not None
            with pytest.raises(openai.AuthenticationError):
                await client.models.list()
            assert [
                r.event.key_id
                for r in await event_store.query(types=("ApiKeyRevoked",))
                if isinstance(r.event, ApiKeyRevoked)
            ] == [key["key_id"]]

            # the last admin key stays; an unknown key is a 404; bad input is a 400 naming it
            last = await admin.delete(f"/v1/keys/{key_id_of(key_sha256(ADMIN_KEY))}")
            assert (last.status_code, last.json()["error"]["code"]) == (409, "last_admin_key")
            unknown = await admin.delete("/v1/keys/000000000000")
            assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "key_not_found")
            bad = await admin.post("/v1/keys", json={"name": "x", "scope": "root"})
            assert bad.status_code == 400
            assert "scope" in bad.json()["error"]["message"]
            blank = await admin.post("/v1/keys", json={"name": " "})
            assert (blank.status_code, blank.json()["error"]["code"]) == (400, "invalid_key_name")

        # the keys given at start are recorded once: giving them again records nothing
        assert stack.cluster_state is not None
        before = len(await event_store.query(types=("ApiKeyCreated",)))
        await bootstrap_keys(stack.cluster_state.controller, KEYS)
        await asyncio.sleep(0.5)
        assert len(await event_store.query(types=("ApiKeyCreated",))) == before


async def test_a_key_over_its_limits_gets_429_with_retry_after(
    nats_url: str, nrt_home: object, database_url: str
) -> None:
    async with start_stack(nats_url, "tiny-support.yaml", database_url=database_url) as stack:
        async with stack.http(api_key=ADMIN_KEY) as admin:
            by_rps = (await admin.post("/v1/keys", json={"name": "slow", "rps": 1})).json()
            by_tokens = (await admin.post("/v1/keys", json={"name": "thrifty", "tokens_per_min": 1})).json()
        async with stack.http(api_key=by_rps["key"]) as http:
            first = await http.get("/v1/models")
            second = await http.get("/v1/models")
        assert first.status_code == 200
        assert second.status_code == 429, second.text
        assert int(second.headers["retry-after"]) >= 1
        error = second.json()["error"]
        assert (error["type"], error["code"]) == ("rate_limit_error", "rate_limit_exceeded")
        assert "requests per second" in error["message"]
        # the OpenAI client sees a RateLimitError; other keys are not held back
        with pytest.raises(openai.RateLimitError):
            await stack.client(api_key=by_rps["key"]).models.list()
        assert (await stack.client().models.list()).data

        client = stack.client(api_key=by_tokens["key"])
        await client.chat.completions.create(model="router", messages=user(BILLING), max_tokens=3)  # uses > 1 token
        with pytest.raises(openai.RateLimitError) as limited:
            await client.chat.completions.create(model="router", messages=user(BILLING), max_tokens=3)
        assert "tokens per minute" in limited.value.message
        assert int(limited.value.response.headers["retry-after"]) >= 1
