"""Each service starts with ``python -m <name>``, answers health checks and stops on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest
from nats.aio.client import Client

from nrt.adapters.bus import rpc
from nrt.adapters.infra import free_port
from nrt.core.protocol import Health, HealthQuery
from nrt.entrypoints.service import health_subject


async def _until_healthy(nc: Client, service: str, deadline: float) -> Health:
    while True:
        try:
            return await rpc.request(nc, health_subject(service), HealthQuery(), Health, timeout=0.5)
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


@pytest.mark.parametrize("service", ["router_svc", "specialist_worker", "cluster_state"])
async def test_nats_service_starts_answers_health_and_stops(
    service: str, nc: Client, nats_url: str, request: pytest.FixtureRequest
) -> None:
    env = {**os.environ, "NRT_NATS_URL": nats_url}
    if service == "cluster_state":  # it records the event log: it needs its database
        env["NRT_DATABASE_URL"] = request.getfixturevalue("database_url")
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", service, env=env, stderr=asyncio.subprocess.PIPE)
    try:
        health = await _until_healthy(nc, service, time.monotonic() + 20)
        assert health.service == service
        assert health.status == "ok"
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 10) == 0
        assert proc.stderr is not None
        assert f"{service} stopped" in (await proc.stderr.read()).decode()
    finally:
        if proc.returncode is None:
            proc.kill()


def test_gateway_starts_and_answers_healthz() -> None:
    port = free_port()
    env = {**os.environ, "NRT_GATEWAY_PORT": str(port)}
    proc = subprocess.Popen([sys.executable, "-m", "api_gateway"], env=env, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the gateway did not come up"
                time.sleep(0.1)
        assert response.status_code == 200
        assert response.json() == {"status": "ok"}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
