"""A stack with several of a service: each service its own process under ``nrt up``'s supervisor, on given
NATS and PostgreSQL servers, with as many api_gateway and router_svc processes as asked.

``nrt up`` runs one of each; a deployment runs several gateways (behind a load balancer) and several
router_svc (one queue group on ``nrt.route``). Here each is a real process, named ``api_gateway-1``,
``router_svc-2``..., that a test can kill by name (:meth:`MultiStack.kill`); the supervisor restarts a
killed one, as ``nrt up`` would.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import nats
from nats.js.errors import NotFoundError

from nrt.adapters.bus import subjects
from nrt.adapters.bus.jetstream import ensure_events_stream
from nrt.adapters.infra import free_port
from nrt.core.api_keys import generate_key
from nrt.entrypoints.stack.supervisor import Supervisor
from nrt.testing.stacks import tiny_manifest

READY_WITHIN = 240.0


@dataclass
class MultiStack:
    supervisor: Supervisor
    gateway_urls: list[str]
    api_key: str
    admin_key: str
    logs: Path
    crashes: list[str]
    probes: set[str]  # the ids of the requests the start-up sent (they are in the log too)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}

    def pause(self, name: str) -> float:
        """SIGSTOP the process ``name``: it holds what it has received and answers nothing; when (monotonic)."""
        os.kill(self.supervisor.pids()[name], signal.SIGSTOP)
        return time.monotonic()

    def kill(self, name: str) -> float:
        """SIGKILL the process ``name`` (``router_svc-1``...); when it was killed (monotonic)."""
        pid = self.supervisor.pids()[name]
        os.kill(pid, signal.SIGKILL)
        return time.monotonic()

    def tails(self, chars: int = 2000) -> str:
        return "\n".join(
            f"--- {log.name}\n{log.read_text(errors='replace')[-chars:]}" for log in sorted(self.logs.glob("*.log"))
        )


async def _answers(url: str, headers: dict[str, str], probes: set[str]) -> bool:
    """Whether the gateway at ``url`` is ready and answers a routed request (whose id joins ``probes``)."""
    body = {"model": "router", "messages": [{"role": "user", "content": "I was charged twice"}], "max_tokens": 2}
    async with httpx.AsyncClient(base_url=url, timeout=30, headers=headers) as http:
        try:
            ready = await http.get("/readyz")
            if ready.status_code != 200:
                return False
            answer = await http.post("/v1/chat/completions", json=body)
        except httpx.TransportError:
            return False
        if (request_id := answer.headers.get("x-nrt-request-id")) is not None:
            probes.add(request_id)
        return answer.status_code == 200


async def _entry_hosts(url: str, admin_key: str) -> int:
    """How many workers hold the entry model (``router``) resident, as the cluster's state says."""
    async with httpx.AsyncClient(base_url=url, timeout=10, headers={"Authorization": f"Bearer {admin_key}"}) as http:
        state = (await http.get("/v1/cluster")).json()
    placements = state.get("models", {}).get("router", {}).get("placements", {})
    return sum(1 for placement in placements.values() if placement["tier"] == "resident")


@contextlib.asynccontextmanager
async def multi_stack(
    nats_url: str, database_url: str, work: Path, *, gateways: int = 2, routers: int = 2
) -> AsyncIterator[MultiStack]:
    """cluster_state, a specialist worker, ``routers`` router_svc and ``gateways`` api_gateway processes on the
    tiny manifest (NRT_HOME: the caller's, holding the tiny models); yields once every gateway answers a routed
    request, stops every process on the way out."""
    manifest = work / "tiny.yaml"
    manifest.write_text(tiny_manifest("two-of-each", legal_tier="resident"))
    api_key, admin_key = generate_key(), generate_key()
    crashes: list[str] = []

    def on_child(message: str) -> None:
        if " exited with " in message:
            crashes.append(message)

    logs = work / "logs"
    supervisor = Supervisor(on_child, log_dir=str(logs))
    env = {
        "NRT_NATS_URL": nats_url,
        "NRT_DATABASE_URL": database_url,
        "NRT_MANIFEST": str(manifest),
        "NRT_API_KEY": api_key,
        "NRT_ADMIN_KEY": admin_key,
        "NRT_LOG_LEVEL": "WARNING",
        "NRT_METRICS_HOST": "127.0.0.1",
        "NRT_GATEWAY_HOST": "127.0.0.1",
    }
    nc = await nats.connect(nats_url)  # a fresh events stream, before the services, as `nrt up` makes it
    try:
        with contextlib.suppress(NotFoundError):
            await nc.jetstream().delete_stream(subjects.EVENTS_STREAM)
        await ensure_events_stream(nc.jetstream())
    finally:
        await nc.close()
    try:
        for service in ("cluster_state", "specialist_worker"):
            await supervisor.start(
                supervisor.python_module(service, service, env | {"NRT_METRICS_PORT": str(free_port())})
            )
        for n in range(1, routers + 1):
            own = {"NRT_METRICS_PORT": str(free_port())}
            await supervisor.start(supervisor.python_module(f"router_svc-{n}", "router_svc", env | own))
        urls = []
        for n in range(1, gateways + 1):
            port = free_port()
            urls.append(f"http://127.0.0.1:{port}")
            own = {"NRT_GATEWAY_PORT": str(port), "NRT_GATEWAY_INSTANCE": f"gateway-{n}"}
            await supervisor.start(supervisor.python_module(f"api_gateway-{n}", "api_gateway", env | own))
        stack = MultiStack(supervisor, urls, api_key, admin_key, logs, crashes, set())
        deadline = time.monotonic() + READY_WITHIN
        for url in urls:
            while not await _answers(url, stack.headers, stack.probes):
                assert not crashes, f"{crashes[0]}\n{stack.tails()}"
                assert time.monotonic() < deadline, f"{url} did not answer in time\n{stack.tails()}"
                await asyncio.sleep(0.5)
        while (hosts := await _entry_hosts(urls[0], admin_key)) < routers:  # every router_svc serves
            assert not crashes, f"{crashes[0]}\n{stack.tails()}"
            assert time.monotonic() < deadline, f"{hosts} of {routers} router_svc host the entry model\n{stack.tails()}"
            await asyncio.sleep(0.5)
        yield stack
    finally:
        await supervisor.stop()
