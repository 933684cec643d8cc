"""``GET /v1/events/stream``: the event log as server-sent events, on the real stack.

History from ``last`` messages back, then live; filtered by type on the server; each frame
carries the stream sequence, the type and the event's canonical JSON. Bad input is a 400 naming
it, no key a 401, the key events without an admin key a 403.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from litestar import Litestar

from harness import ADMIN_KEY, Stack, start_stack
from nrt.core.events import decode

BILLING = "I was charged twice for my order"


async def frames(response: httpx.Response) -> AsyncIterator[dict[str, str]]:
    """The SSE frames of ``response`` (comments dropped), as field -> value."""
    frame: dict[str, str] = {}
    async for line in response.aiter_lines():
        if not line:
            if frame:
                yield frame
            frame = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            frame[name] = value.removeprefix(" ")


async def collect(stack: Stack, params: dict[str, Any], until: str, api_key: str | None = None) -> list[dict[str, str]]:
    """Frames of the feed with ``params`` up to and including the first of type ``until``."""
    out = []
    async with (
        stack.http(**({"api_key": api_key} if api_key else {})) as http,
        http.stream("GET", "/v1/events/stream", params=params) as response,
    ):
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        async with asyncio.timeout(10):
            async for frame in frames(response):
                out.append(frame)
                if frame["event"] == until:
                    return out
    raise AssertionError(f"the feed ended before a {until}")


async def test_the_feed_replays_then_follows_filtered_by_type(nats_url: str, nrt_home: object) -> None:
    async with start_stack(nats_url, "tiny-support.yaml") as stack:
        await replays_then_follows(stack)


async def test_the_feed_works_within_the_gateways_bus_permissions(
    secure_nats_url: str, bus_keys: Path, nrt_home: object
) -> None:
    """The gateway connects as itself: its ordered consumer is one the contract lets it create."""
    async with start_stack(secure_nats_url, "tiny-support.yaml", keys=bus_keys) as stack:
        await replays_then_follows(stack)


async def replays_then_follows(stack: Stack) -> None:
    """History from the start of the stream (no key events for an infer key), then a routed request live."""
    history = await collect(stack, {"last": 1000}, until="ManifestApplied")
    for frame in history:
        event = decode(frame["data"])
        assert event.type == frame["event"]
        assert int(frame["id"]) >= 1
    assert "ApiKeyCreated" not in {f["event"] for f in history}, "an infer key sees no key hashes"

    async def routed() -> str:
        await asyncio.sleep(0.3)  # the feed is following by then
        answer = await stack.client().chat.completions.with_raw_response.create(
            model="router", messages=[{"role": "user", "content": BILLING}], max_tokens=3
        )
        return str(answer.headers["X-NRT-Request-Id"])

    sending = asyncio.create_task(routed())
    live = await collect(stack, {"types": "RequestRouted", "last": 0}, until="RequestRouted")
    request_id = await sending
    assert {f["event"] for f in live} == {"RequestRouted"}
    event = json.loads(live[-1]["data"])
    assert (event["request_id"], event["intent"], event["target"]) == (request_id, "billing", "billing")

    admin = await collect(stack, {"types": "ApiKeyCreated"}, until="ApiKeyCreated", api_key=ADMIN_KEY)
    assert {f["event"] for f in admin} == {"ApiKeyCreated"}


async def test_bad_feed_requests_are_refused_clearly(nats_url: str, nrt_home: object) -> None:
    async with (
        start_stack(nats_url, "tiny-support.yaml") as stack,
        stack.http() as http,
        stack.http(api_key=None) as anonymous,
    ):
        unknown = await http.get("/v1/events/stream", params={"types": "RequestRouted,Nope"})
        assert unknown.status_code == 400
        assert "Nope" in unknown.json()["error"]["message"]
        assert unknown.json()["error"]["param"] == "types"
        too_many = await http.get("/v1/events/stream", params={"last": 5000})
        assert too_many.status_code == 400
        assert too_many.json()["error"]["param"] == "last"
        not_a_number = await http.get("/v1/events/stream", params={"last": "many"})
        assert not_a_number.status_code == 400
        assert "last" in not_a_number.text
        keys = await http.get("/v1/events/stream", params={"types": "ApiKeyCreated"})
        assert keys.status_code == 403
        assert "admin" in keys.json()["error"]["message"]
        assert (await anonymous.get("/v1/events/stream")).status_code == 401
        page = await anonymous.get("/ui/")
        assert page.status_code == 200
        assert "NRT dashboard" in page.text
        assert (await anonymous.get("/ui/app.js")).status_code == 200


async def test_the_feed_ends_when_the_gateway_is_closing(nats_url: str, nrt_home: object) -> None:
    """An open feed (a dashboard left open) must not hold up the gateway's stop."""
    async with start_stack(nats_url, "tiny-support.yaml") as stack, stack.http() as http:
        app = stack.gateway.config.app
        assert isinstance(app, Litestar)
        async with http.stream("GET", "/v1/events/stream", params={"last": 0}) as response:
            assert response.status_code == 200
            app.state.cluster_link.closing.set()
            async with asyncio.timeout(3):
                rest = [frame async for frame in frames(response)]
        assert rest == []
        app.state.cluster_link.closing.clear()
