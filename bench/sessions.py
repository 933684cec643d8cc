"""Sessions benchmark: a conversation's turn-2 time to first token with two workers on its model, against one.

The stack is ``nrt up``'s services as processes (cluster_state, router_svc, api_gateway) and two
specialist workers, on a manifest whose ``billing`` (``catalogue://tiny-llama``, a conversation
template, so turn 2's prompt extends turn 1's prompt and answer) has ``replicas: 2``. Each session
sends a long first turn (``--words`` words), then a short second turn streamed: the time to its first
frame at the client is the figure. With sessions staying where their KV is (router_svc sends a
session's turn to the worker holding it), turn 2 prefills only its new tokens on either worker.

In the same run, three figures, each the median over ``--sessions`` sessions, one at a time, measured in
two rounds (two workers, then one, then two again, then one) so that drift falls on each alike:
1. two workers on billing, turn 2 with its session id (``X-NRT-Session``);
2. the same turn 2 without a session id (any worker, the whole conversation prefilled): what losing
   the KV costs, for reference;
3. one worker on billing (the second one stopped), turn 2 with its session id.

It prints ``turn-2 ttft two workers vs one ratio R`` (1 / 3; the target is about 1.0) and
``turn-2 ttft without the session's KV vs with ratio R`` (2 / 1). Uses NRT_NATS_URL /
NRT_DATABASE_URL when set, else embedded servers; every process it starts is stopped at the end.

    python -m bench.sessions [--sessions 20] [--words 40]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import httpx
import nats

from bench.common import fresh_database, postgres
from bench.gateway_client import BENCH_API_KEY, JSON_HEADERS
from nrt.adapters.bus.broker import start_broker
from nrt.adapters.bus.follow import EventFollower
from nrt.adapters.bus.jetstream import ensure_events_stream
from nrt.adapters.catalogue import prepare
from nrt.adapters.infra import free_port
from nrt.core.routing import serving_workers
from nrt.core.state import ClusterState
from nrt.entrypoints.stack.supervisor import Supervisor
from nrt.testing.servers import nats_server

WORKERS = ("bench-w1", "bench-w2")
READY_WITHIN = 300.0
MANIFEST = """\
cluster: bench-sessions
models:
  router:
    source: "catalogue://tiny-llama"
    tier: resident
    priority: critical
    confidence_threshold: 0.0
  specialists:
    - id: billing
      source: "catalogue://tiny-llama"
      tier: resident
      replicas: 2
      template: "Billing desk.\\n\\n{turns}Agent:"
      turn_template: {user: "Customer: {content}\\n", assistant: "Agent:{content}\\n\\n"}
      generation: {max_tokens: 8, temperature: 0.0}
routing:
  entry: router
  dispatch_rule: router.output.intent -> specialists.{intent}
"""
WORDS = ["order", "invoice", "charge", "refund", "account", "card", "payment", "receipt", "delivery", "address"]


@dataclass(frozen=True)
class Stack:
    gateway_url: str
    follower: EventFollower
    workers: dict[str, asyncio.subprocess.Process]
    spawn: Callable[[str], Awaitable[None]]  # (re)start a worker process

    async def only(self, wanted: tuple[str, ...]) -> None:
        """Stop or start the second worker so that exactly ``wanted`` serve billing, per the log."""
        second = WORKERS[1]
        if second in wanted and self.workers[second].returncode is not None:
            await self.spawn(second)
        elif second not in wanted and self.workers[second].returncode is None:
            self.workers[second].send_signal(signal.SIGTERM)  # it leaves: billing on one worker
            await self.workers[second].wait()
        await until_serving(self.follower, wanted, self.workers)


def first_turn(words: int, i: int) -> str:
    return " ".join(WORDS[(i + k) % len(WORDS)] for k in range(words)) + "."


async def turn_one(client: httpx.AsyncClient, session: str, text: str) -> list[dict[str, str]]:
    messages = [{"role": "user", "content": text}]
    body = {"model": "billing", "messages": messages}
    response = await client.post("/v1/chat/completions", json=body, headers={**JSON_HEADERS, "X-NRT-Session": session})
    if response.status_code != 200:
        raise SystemExit(f"turn 1: HTTP {response.status_code}: {response.text[:300]}")
    answer = response.json()["choices"][0]["message"]["content"] or ""
    return [*messages, {"role": "assistant", "content": answer}, {"role": "user", "content": "And the refund?"}]


async def turn_two_ttft(client: httpx.AsyncClient, session: str | None, messages: list[dict[str, str]]) -> float:
    """Milliseconds from sending turn 2 (streamed) to its first frame at the client."""
    headers = {**JSON_HEADERS, **({"X-NRT-Session": session} if session else {})}
    body = json.dumps({"model": "billing", "messages": messages, "stream": True}).encode()
    started = time.perf_counter()
    first: float | None = None
    async with client.stream("POST", "/v1/chat/completions", content=body, headers=headers) as response:
        if response.status_code != 200:
            raise SystemExit(f"turn 2: HTTP {response.status_code}: {(await response.aread())[:300]!r}")
        async for line in response.aiter_lines():
            if first is None and line.startswith("data: "):
                first = (time.perf_counter() - started) * 1e3
    if first is None:
        raise SystemExit("turn 2: the stream had no frame")
    return first


def holds_session(session: str, state: ClusterState) -> bool:
    return session in state.sessions


async def phase(stack: Stack, tag: str, sessions: int, words: int, with_session: bool) -> list[float]:
    """Turn 2's time to first frame in each of ``sessions`` conversations."""
    figures = []
    async with httpx.AsyncClient(base_url=stack.gateway_url, timeout=60) as client:
        for i in range(sessions):
            session = f"{tag}-{i}"
            messages = await turn_one(client, session, first_turn(words, i))
            # a person's next turn comes seconds later: the log has the turn's SessionTouched by then
            await stack.follower.wait_for(partial(holds_session, session), within=10)
            figures.append(await turn_two_ttft(client, session if with_session else None, messages))
    return figures


@contextlib.asynccontextmanager
async def running() -> AsyncIterator[Stack]:
    await asyncio.to_thread(prepare, "tiny-llama")
    with contextlib.ExitStack() as servers:
        tmp = Path(servers.enter_context(tempfile.TemporaryDirectory(prefix="nrt-bench-sessions-")))
        nats_url = servers.enter_context(nats_server(tmp / "nats", env_var="NRT_NATS_URL", use_docker=False))
        database_url = servers.enter_context(fresh_database(servers.enter_context(postgres())))
        nc = await nats.connect(nats_url)
        await ensure_events_stream(nc.jetstream())
        await nc.close()
        manifest = tmp / "bench-sessions.yaml"
        manifest.write_text(MANIFEST)
        port = free_port()
        env = {
            "NRT_NATS_URL": nats_url,
            "NRT_DATABASE_URL": database_url,
            "NRT_MANIFEST": str(manifest),
            "NRT_API_KEY": BENCH_API_KEY,
            "NRT_GATEWAY_HOST": "127.0.0.1",
            "NRT_GATEWAY_PORT": str(port),
            "NRT_LOG_LEVEL": "WARNING",
            "NRT_ROUTER_ORT_THREADS": "1",
            "NRT_WORKER_ORT_THREADS": "1",
        }
        supervisor = Supervisor(lambda m: print(f"bench.sessions: {m}", file=sys.stderr), log_dir=str(tmp / "logs"))
        workers: dict[str, asyncio.subprocess.Process] = {}
        broker = await start_broker(nats_url, "api_gateway")
        try:
            for service in ("cluster_state", "router_svc", "api_gateway"):
                await supervisor.start(supervisor.python_module(service, service, env))

            async def spawn(worker_id: str) -> None:
                log = (tmp / f"{worker_id}.log").open("ab")
                workers[worker_id] = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "specialist_worker",
                    env={**os.environ, **env, "NRT_WORKER_ID": worker_id},
                    stdout=log,
                    stderr=log,
                )

            for worker_id in WORKERS:
                await spawn(worker_id)
            follower = EventFollower(broker)
            await follower.start()
            await until_serving(follower, WORKERS, workers, tmp)
            stack = Stack(f"http://127.0.0.1:{port}", follower, workers, spawn)
            await until_ready(stack.gateway_url)
            yield stack
        finally:
            await broker.stop()
            for process in workers.values():
                if process.returncode is None:
                    process.terminate()
                    await process.wait()
            await supervisor.stop()


async def until_serving(
    follower: EventFollower,
    wanted: tuple[str, ...],
    workers: dict[str, asyncio.subprocess.Process],
    logs: Path | None = None,
) -> None:
    """Until the log says exactly ``wanted`` serve billing; SystemExit when a wanted worker exits first."""
    deadline = time.monotonic() + READY_WITHIN
    while serving_workers(follower.state, "billing") != wanted:
        for worker_id in wanted:
            if (code := workers[worker_id].returncode) is not None:
                tail = (logs / f"{worker_id}.log").read_text(errors="replace")[-2000:] if logs else ""
                raise SystemExit(f"worker {worker_id} exited with {code}:\n{tail}")
        if time.monotonic() > deadline:
            raise SystemExit(f"billing was not on {', '.join(wanted)} within {READY_WITHIN:g}s")
        await asyncio.sleep(0.2)


async def until_ready(url: str) -> None:
    deadline = time.monotonic() + READY_WITHIN
    async with httpx.AsyncClient(timeout=10) as client:
        while True:
            with contextlib.suppress(httpx.TransportError):
                if (await client.get(f"{url}/readyz")).status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise SystemExit("the stack did not become ready")
            await asyncio.sleep(0.3)


async def main(sessions: int, words: int) -> None:
    two: list[float] = []
    cold: list[float] = []
    one: list[float] = []
    half = max(1, sessions // 2)
    async with running() as stack:
        await phase(stack, "warm", 10, words, with_session=True)  # both workers (the ids hash to each)
        for round_ in range(2):  # each figure twice, at different times: drift falls on all of them alike
            two += await phase(stack, f"two{round_}", half, words, with_session=True)
            cold += await phase(stack, f"cold{round_}", half, words, with_session=False)
            await stack.only(WORKERS[:1])
            one += await phase(stack, f"one{round_}", half, words, with_session=True)
            await stack.only(WORKERS)
    m_two, m_cold, m_one = statistics.median(two), statistics.median(cold), statistics.median(one)
    print(
        f"sessions benchmark: billing (catalogue://tiny-llama), turn 1 of {words} words, turn 2 streamed; "
        f"median of {len(two)} sessions each, in two rounds"
    )
    print(f"turn-2 ttft, two workers, with its session:    {m_two:8.2f} ms")
    print(f"turn-2 ttft, two workers, without its session: {m_cold:8.2f} ms (the whole conversation prefilled)")
    print(f"turn-2 ttft, one worker, with its session:     {m_one:8.2f} ms")
    print(f"turn-2 ttft without the session's KV vs with ratio {m_cold / m_two:.2f}")
    print(f"turn-2 ttft two workers vs one ratio {m_two / m_one:.2f}")


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=20, help="conversations per figure")
    parser.add_argument("--words", type=int, default=40, help="words in each conversation's first turn")
    args = parser.parse_args()
    asyncio.run(main(args.sessions, args.words))


if __name__ == "__main__":
    cli()
