"""``NRT_AUTH=off``: the gateway checks no key (local experiments) and says so loudly at start."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from api_gateway.settings import GatewaySettings
from harness import start_stack


async def test_with_auth_off_no_key_is_needed_and_the_gateway_warns(
    nats_url: str, nrt_home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = GatewaySettings(nats_url=nats_url, auth=False, route_timeout=10, idle_timeout=10, request_timeout=30)
    with caplog.at_level(logging.WARNING, logger="api_gateway"):
        async with start_stack(nats_url, "tiny-support.yaml", settings=settings) as stack:
            warned = [r.getMessage() for r in caplog.records if r.name == "api_gateway"]
            async with stack.http(api_key=None) as http:
                models = await http.get("/v1/models")
                cluster = await http.get("/v1/cluster")
                answer = await http.post(
                    "/v1/chat/completions",
                    json={"model": "router", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
                )
    assert any("AUTHENTICATION IS OFF" in message for message in warned), warned
    assert models.status_code == 200
    assert answer.status_code == 200, answer.text
    assert cluster.json()["api_keys"]  # no key to check: every caller is an admin
