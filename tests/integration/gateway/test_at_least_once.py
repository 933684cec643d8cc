"""Events are at least once, though no request waits for JetStream's acknowledgement.

A publisher on the request path writes each event to its outbox (one ``write``) before it
publishes it, and settles it when the stream acknowledges it. A publisher killed with SIGKILL
right after a request completed leaves its events there; the next process of the service
sends them again, and cluster_state records each once (its id is its idempotency key).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from harness import API_KEY, start_stack
from nrt.adapters.bus import subjects
from nrt.adapters.bus.connection import connect
from nrt.adapters.bus.emitter import EventEmitter
from nrt.adapters.bus.outbox import SUFFIX, Outbox
from nrt.adapters.infra import free_port
from nrt.adapters.store import EventStore
from nrt.core.events import RequestAdmitted, RequestCompleted, RequestRouted

BILLING = "I was charged twice for my order"

# A publisher that emits a request's events and is killed before its send loop ever runs:
# nothing reaches NATS, everything is in its outbox.
DOOMED = """
import asyncio, os, signal, sys
from pathlib import Path
from nrt.adapters.bus.connection import connect
from nrt.adapters.bus.emitter import EventEmitter
from nrt.adapters.bus.outbox import Outbox
from nrt.core.events import RequestAdmitted, RequestCompleted

async def main(nats_url: str, home: str) -> None:
    nc = await connect(nats_url, "doomed-gateway")
    emitter = EventEmitter(nc, outbox=Outbox.open(Path(home), "api_gateway"))
    await emitter.start()
    emitter.emit(RequestAdmitted(request_id="doomed", manifest_version=1, model_id="billing"))
    emitter.emit(RequestCompleted(
        request_id="doomed", manifest_version=1, model_id="billing",
        prompt_tokens=3, completion_tokens=4, latency_ms=5.0,
    ))
    os.kill(os.getpid(), signal.SIGKILL)  # the request is done; the process dies before any await

asyncio.run(main(*sys.argv[1:]))
"""


async def request_events(store: EventStore, request_id: str, expected: int, within: float = 20.0) -> list[str]:
    """The types of ``request_id``'s events in the PostgreSQL log, once ``expected`` of them are there."""
    deadline = time.monotonic() + within
    while True:
        types = [r.event.type for r in await store.query(stream_id=f"request:{request_id}")]
        if len(types) >= expected or time.monotonic() > deadline:
            return types
        await asyncio.sleep(0.1)


async def test_events_of_a_publisher_killed_before_sending_them_are_sent_by_the_next_one(
    nats_url: str, nrt_home: Path, database_url: str, event_store: EventStore
) -> None:
    async with start_stack(nats_url, "tiny-support.yaml", database_url=database_url) as stack:
        js = stack.nc.jetstream()
        before = (await js.stream_info(subjects.EVENTS_STREAM)).state.messages
        doomed = await asyncio.create_subprocess_exec(sys.executable, "-c", DOOMED, nats_url, str(nrt_home))
        assert await asyncio.wait_for(doomed.wait(), 60) == -signal.SIGKILL
        await asyncio.sleep(0.5)
        assert (await js.stream_info(subjects.EVENTS_STREAM)).state.messages == before  # nothing was published
        left = sorted((nrt_home / "outbox").glob(f"api_gateway-{doomed.pid}-*{SUFFIX}"))
        assert left, "the killed publisher left no outbox"
        assert await request_events(event_store, "doomed", 2, within=0.5) == []

        # the next process of the service adopts the outbox and sends its events again
        nc = await connect(nats_url, "next-gateway")
        outbox = Outbox.open(nrt_home, "api_gateway")
        emitter = EventEmitter(nc, outbox=outbox)
        await emitter.start()
        await emitter.flush(within=10)
        assert emitter.sent == 2
        assert await request_events(event_store, "doomed", 2) == ["RequestAdmitted", "RequestCompleted"]
        assert not [path for path in left if path.exists()]  # adopted, then removed
        assert outbox.outstanding == 0  # every event it sent was stored
        await emitter.close()
        await nc.drain()
        assert not [path for path in outbox.paths if path.exists()]  # all settled: its files go with it


@pytest.fixture
def gateway_process(nats_url: str, nrt_home: Path, tmp_path: Path) -> Iterator[object]:
    """``python -m api_gateway`` as a process of its own, on a free port (started again on demand)."""
    processes: list[subprocess.Popen[bytes]] = []
    port = free_port()
    env = {
        **os.environ,
        "NRT_NATS_URL": nats_url,
        "NRT_HOME": str(nrt_home),
        "NRT_GATEWAY_PORT": str(port),
        "NRT_LOG_LEVEL": "WARNING",
    }

    def start() -> tuple[subprocess.Popen[bytes], str]:
        log = (tmp_path / f"gateway-{len(processes)}.log").open("wb")
        process = subprocess.Popen([sys.executable, "-m", "api_gateway"], env=env, stdout=log, stderr=log)
        processes.append(process)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, (tmp_path / f"gateway-{len(processes) - 1}.log").read_text()
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    return process, url
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the gateway process did not become ready"
            time.sleep(0.1)

    yield start
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(30)


async def test_a_gateway_killed_right_after_a_request_completes_loses_none_of_its_events(
    nats_url: str, nrt_home: Path, database_url: str, event_store: EventStore, gateway_process: object
) -> None:
    start = gateway_process
    async with start_stack(nats_url, "tiny-support.yaml", database_url=database_url):
        process, url = await asyncio.to_thread(start)  # type: ignore[operator]
        body = {"model": "router", "messages": [{"role": "user", "content": BILLING}], "max_tokens": 4}
        async with httpx.AsyncClient(base_url=url, timeout=30, headers={"Authorization": f"Bearer {API_KEY}"}) as http:
            response = await http.post("/v1/chat/completions", json=body)
        os.kill(process.pid, signal.SIGKILL)  # the moment the answer is in: no goodbye, no flush
        assert response.status_code == 200, response.text
        request_id = response.headers["x-nrt-request-id"]
        assert process.wait(10) == -signal.SIGKILL
        killed = sorted((nrt_home / "outbox").glob(f"api_gateway-{process.pid}-*{SUFFIX}"))
        assert killed, "the killed gateway kept no outbox"
        # the next gateway process adopts what the killed one left, and sends it again
        await asyncio.to_thread(start)  # type: ignore[operator]
        types = await request_events(event_store, request_id, 3)
        assert sorted(types) == ["RequestAdmitted", "RequestCompleted", "RequestRouted"]
        assert types.index("RequestAdmitted") < types.index("RequestCompleted")
        recorded = await event_store.query(stream_id=f"request:{request_id}")
        assert len({r.event.event_id for r in recorded}) == len(recorded)  # each once, however often it was sent
        assert {type(r.event) for r in recorded} == {RequestAdmitted, RequestRouted, RequestCompleted}
        assert not [path for path in killed if path.exists()]  # adopted, then removed
