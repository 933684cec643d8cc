"""Gateway benchmark: routed requests through the whole stack against a bare Litestar -> NATS floor.

1. NRT: the real stack as ``nrt up`` runs it: cluster_state, specialist_worker, router_svc and
   api_gateway, each its own process under ``nrt.stack.supervisor``, on a small manifest whose
   router and specialists are the catalogue's random 2-layer Llama (``catalogue://tiny-llama``,
   prepared in seconds the first time, then cached under NRT_HOME). Every request is routed
   (``model="router"``): gateway -> router_svc -> the router model classifies -> dispatch ->
   the specialist generates ``--max-tokens`` greedy tokens -> gateway -> JSON.
2. Floor, in the same run, on the same NATS server and with the same client: a bare Litestar
   app, served by uvicorn as the gateway is, whose POST route sends the request body over
   NATS to an echo responder in another process and returns JSON (two NATS transits).
3. Path floor, for reference: the same bare pieces along NRT's request path, doing no work.
   The Litestar app sends the body to a bare router process, which asks the echo responder
   (the "classification") and then forwards the body to it with the app's reply inbox (the
   "specialist"), which answers the app directly: five NATS transits, as a routed request
   crosses (gateway -> router_svc -> router model -> router_svc -> specialist -> gateway).
4. Orchestration overhead of each request: its end-to-end latency minus the model compute the
   workers report in the response's ``nrt`` block (the router's classification plus the
   specialist's generation, ``nrt.hops[].compute_ms``), as a ratio against the floor's latency
   at the same concurrency. Target: at most 2x. The path floor's ratio to the floor shows how
   much of that the five transits take before any work is done.

5. The hot path's transport: ``nrt.route`` plus a token stream to the caller's inbox, doing no
   work, over FastStream and over raw nats-py (``bench.bus_transport``), in the same run; NRT
   would put them on FastStream only within 10% of raw.

Non-streaming requests through one ``httpx.AsyncClient`` per level; p50/p99 latency and req/s
at concurrency 1 and 16, each after a warm-up. Uses NRT_NATS_URL / NRT_DATABASE_URL when set
(that NATS must not serve another NRT stack; the events go to a fresh database on that
PostgreSQL server), else embedded servers; every process it starts is stopped at the end.
The services and the floor both log at WARNING (no per-request access log).

    python -m bench.gateway [--requests 200] [--warmup 32] [--max-tokens 8]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import msgspec
import nats
import numpy as np
import uvicorn
from litestar import Litestar, post
from nats.aio.client import Client
from nats.aio.msg import Msg

from bench import bus_transport
from bench.common import fresh_database, postgres, report
from nrt.bus.connection import connect
from nrt.bus.jetstream import ensure_events_stream
from nrt.catalogue import prepare
from nrt.cli.up import SERVICES
from nrt.infra import free_port, nats_server
from nrt.stack.supervisor import Supervisor

CONCURRENCY = (1, 16)
ECHO_SUBJECT = "bench.gateway.echo"
ROUTE_SUBJECT = "bench.gateway.route"
FLOOR_PATH = "/v1/echo"
PATH_FLOOR_PATH = "/v1/routed-echo"
NRT_PATH = "/v1/chat/completions"
JSON_HEADERS = {"Content-Type": "application/json"}
REQUEST_TIMEOUT = 60.0
READY_WITHIN = 120.0  # each start-up step: /readyz green, a routed answer, the floor's answer
TARGET = "≤ 2.0"

PROMPTS = (
    "I was charged twice this month",
    "The app crashes when I upload a file",
    "Please send me a copy of my last invoice",
    "My password reset link does not work",
)

MANIFEST = """\
cluster: bench-gateway
resources: {{gpu_budget: 1GB, ram_budget: 1GB}}
models:
  router: {{source: "catalogue://tiny-llama", tier: resident, priority: critical, confidence_threshold: 0.0}}
  specialists:
    - id: billing
      source: "catalogue://tiny-llama"
      tier: resident
      co_activation: router
      generation: {{max_tokens: {tokens}, temperature: 0.0}}
    - id: technical
      source: "catalogue://tiny-llama"
      tier: resident
      co_activation: router
      generation: {{max_tokens: {tokens}, temperature: 0.0}}
routing:
  entry: router
  dispatch_rule: router.output.intent -> specialists.{{intent}}
"""

_json = msgspec.json.Encoder()
_decode = msgspec.json.Decoder()


# -- the floor's two processes -------------------------------------------------------------


def floor_app(nats_url: str) -> Litestar:
    """One POST route: the JSON body goes over NATS to the echo responder and comes back as JSON."""
    bus: dict[str, Client] = {}

    @contextlib.asynccontextmanager
    async def lifespan(_: Litestar) -> AsyncIterator[None]:
        bus["nc"] = await connect(nats_url, name="bench-floor")
        try:
            yield
        finally:
            await bus["nc"].drain()

    @post(FLOOR_PATH, status_code=200)
    async def echo(data: dict[str, Any]) -> dict[str, Any]:
        reply = await bus["nc"].request(ECHO_SUBJECT, _json.encode(data), timeout=REQUEST_TIMEOUT)
        return {"object": "echo", "echo": _decode.decode(reply.data)}

    @post(PATH_FLOOR_PATH, status_code=200)
    async def routed_echo(data: dict[str, Any]) -> dict[str, Any]:
        reply = await bus["nc"].request(ROUTE_SUBJECT, _json.encode(data), timeout=REQUEST_TIMEOUT)
        return {"object": "echo", "echo": _decode.decode(reply.data)}

    return Litestar(route_handlers=[echo, routed_echo], lifespan=[lifespan])


async def serve_floor(nats_url: str, port: int) -> None:
    """Served like ``python -m api_gateway``: uvicorn's defaults, one process, on 127.0.0.1."""
    config = uvicorn.Config(floor_app(nats_url), host="127.0.0.1", port=port, log_level="warning")
    await uvicorn.Server(config).serve()


async def serve_echo(nats_url: str) -> None:
    nc = await connect(nats_url, name="bench-echo")

    async def respond(msg: Msg) -> None:
        await msg.respond(msg.data)

    await nc.subscribe(ECHO_SUBJECT, cb=respond)
    await _until_signalled(nc)


async def serve_router(nats_url: str) -> None:
    """The path floor's router: ask the echo responder, then forward to it with the caller's inbox."""
    nc = await connect(nats_url, name="bench-router")
    tasks: set[asyncio.Task[None]] = set()

    async def route(msg: Msg) -> None:
        await nc.request(ECHO_SUBJECT, msg.data, timeout=REQUEST_TIMEOUT)
        await nc.publish(ECHO_SUBJECT, msg.data, reply=msg.reply)

    async def on_message(msg: Msg) -> None:  # concurrently, as router_svc routes
        task = asyncio.create_task(route(msg))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    await nc.subscribe(ROUTE_SUBJECT, cb=on_message)
    await _until_signalled(nc)


async def _until_signalled(nc: Client) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await nc.drain()


# -- the client --------------------------------------------------------------------------------


@dataclasses.dataclass
class Run:
    latencies_ms: list[float]
    compute_ms: list[float]  # per request, the model time the workers report (NRT only)
    targets: Counter[str]
    wall_s: float

    def latency(self, q: float) -> float:
        return float(np.percentile(self.latencies_ms, q))

    def overhead(self, q: float) -> float:
        per_request = np.array(self.latencies_ms) - np.array(self.compute_ms)
        return float(np.percentile(per_request, q))

    def compute(self, q: float) -> float:
        return float(np.percentile(self.compute_ms, q))

    @property
    def rate(self) -> float:
        return len(self.latencies_ms) / self.wall_s


Check = Callable[[httpx.Response], tuple[float, str]]


def check_floor(response: httpx.Response) -> tuple[float, str]:
    if response.status_code != 200:
        raise RuntimeError(f"floor: HTTP {response.status_code}: {response.text[:500]}")
    body = response.json()
    if body.get("object") != "echo":
        raise RuntimeError(f"floor: not an echo: {body}")
    return 0.0, "echo"


def check_routed(response: httpx.Response) -> tuple[float, str]:
    """(model compute ms the workers report, the model that answered) of a routed completion."""
    if response.status_code != 200:
        raise RuntimeError(f"nrt: HTTP {response.status_code}: {response.text[:500]}")
    info = response.json()["nrt"]
    hops = info["hops"]
    if not info["routed"] or [hop["role"] for hop in hops] != ["router", "specialist"]:
        raise RuntimeError(f"nrt: not a routed answer: {info}")
    missing = [hop["role"] for hop in hops if hop["compute_ms"] is None]
    if missing:
        raise RuntimeError(f"nrt: no compute time reported for {', '.join(missing)}: {info}")
    return float(sum(hop["compute_ms"] for hop in hops)), str(info["final_model"])


async def drive(client: httpx.AsyncClient, path: str, bodies: Sequence[bytes], concurrency: int, check: Check) -> Run:
    """``len(bodies)`` requests from ``concurrency`` concurrent callers, each waiting for its answer."""
    latencies: list[float] = []
    computes: list[float] = []
    targets: Counter[str] = Counter()
    pending = iter(bodies)

    async def caller() -> None:
        for body in pending:
            started = time.perf_counter()
            response = await client.post(path, content=body, headers=JSON_HEADERS)
            latencies.append((time.perf_counter() - started) * 1e3)
            compute, target = check(response)
            computes.append(compute)
            targets[target] += 1

    started = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(concurrency)))
    return Run(latencies, computes, targets, time.perf_counter() - started)


async def measure(
    base_url: str, path: str, bodies: Sequence[bytes], warmup: Sequence[bytes], concurrency: int, check: Check
) -> Run:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base_url, timeout=REQUEST_TIMEOUT, limits=limits) as client:
        await drive(client, path, warmup, concurrency, check)
        return await drive(client, path, bodies, concurrency, check)


def request_bodies(n: int, max_tokens: int) -> list[bytes]:
    return [
        _json.encode(
            {
                "model": "router",
                "messages": [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}],
                "max_tokens": max_tokens,
                "temperature": 0.0,
            }
        )
        for i in range(n)
    ]


# -- starting and stopping ---------------------------------------------------------------------


def _tails(logs: Path, chars: int = 1500) -> str:
    """The end of every child's log."""
    parts = [f"--- {log.name}\n{log.read_text(errors='replace')[-chars:]}" for log in sorted(logs.glob("*.log"))]
    return "\n".join(parts) or f"(no logs in {logs})"


async def _until(
    what: str, probe: Callable[[], Awaitable[bool]], within: float, crashes: list[str], logs: Path
) -> None:
    """Poll ``probe`` until it holds; give up (with the logs' tails) when a child crashed or time ran out."""
    deadline = time.monotonic() + within
    while not await probe():
        if crashes:
            raise SystemExit(f"{what}: {crashes[0]}; the logs end with:\n{_tails(logs)}")
        if time.monotonic() > deadline:
            raise SystemExit(f"{what}: not within {within:g}s; the logs end with:\n{_tails(logs)}")
        await asyncio.sleep(0.2)


async def _answers(method: str, url: str, body: bytes = b"") -> bool:
    async with httpx.AsyncClient(timeout=10) as client:
        try:
            response = await client.request(method, url, content=body or None, headers=JSON_HEADERS)
        except httpx.TransportError:
            return False
        return response.status_code == 200


@dataclasses.dataclass(frozen=True)
class Servers:
    nats_url: str
    gateway_url: str  # the NRT stack's api_gateway
    floor_url: str  # the bare Litestar app
    crashes: list[str]  # children that exited on their own (the supervisor restarts them)


@contextlib.asynccontextmanager
async def running(max_tokens: int) -> AsyncIterator[Servers]:
    """NATS, a fresh migrated PostgreSQL database, the four services on the bench manifest (started
    in ``nrt up``'s order by its supervisor) and the floor's two processes; yields once a routed
    request and a floor request have been answered, and stops every process on the way out."""
    await asyncio.to_thread(prepare, "tiny-llama")  # cached under NRT_HOME after the first time
    with contextlib.ExitStack() as servers:
        tmp = Path(servers.enter_context(tempfile.TemporaryDirectory(prefix="nrt-bench-gateway-")))
        nats_url = servers.enter_context(nats_server(tmp / "nats", env_var="NRT_NATS_URL", use_docker=False))
        database_url = servers.enter_context(fresh_database(servers.enter_context(postgres())))
        nc = await nats.connect(nats_url)  # the events stream before the services, as `nrt up` does
        await ensure_events_stream(nc.jetstream())
        await nc.close()
        manifest = tmp / "bench-gateway.yaml"
        manifest.write_text(MANIFEST.format(tokens=max_tokens))
        logs = tmp / "logs"
        crashes: list[str] = []

        def on_child(message: str) -> None:
            print(f"bench.gateway: {message}", file=sys.stderr, flush=True)
            if " exited with " in message:
                crashes.append(message)

        supervisor = Supervisor(on_child, log_dir=str(logs))
        try:
            gateway_port, floor_port = free_port(), free_port()
            env = {
                "NRT_NATS_URL": nats_url,
                "NRT_DATABASE_URL": database_url,
                "NRT_MANIFEST": str(manifest),
                "NRT_GATEWAY_HOST": "127.0.0.1",
                "NRT_GATEWAY_PORT": str(gateway_port),
                "NRT_LOG_LEVEL": "WARNING",
            }
            for service in SERVICES:
                await supervisor.start(supervisor.python_module(service, service, env))
            echo = ["--serve-echo", nats_url]
            await supervisor.start(supervisor.python_module("floor-echo", "bench.gateway", {}, echo))
            router = ["--serve-router", nats_url]
            await supervisor.start(supervisor.python_module("floor-router", "bench.gateway", {}, router))
            floor = ["--serve-floor", nats_url, "--port", str(floor_port)]
            await supervisor.start(supervisor.python_module("floor-litestar", "bench.gateway", {}, floor))
            bus = [nats_url, str(max_tokens)]
            await supervisor.start(supervisor.python_module("bus-transport", "bench.bus_transport", {}, bus))
            up = Servers(nats_url, f"http://127.0.0.1:{gateway_port}", f"http://127.0.0.1:{floor_port}", crashes)
            body = request_bodies(1, max_tokens)[0]

            async def ready() -> bool:
                return await _answers("GET", up.gateway_url + "/readyz")

            async def routed() -> bool:
                return await _answers("POST", up.gateway_url + NRT_PATH, body)

            async def floor_up() -> bool:
                return await _answers("POST", up.floor_url + FLOOR_PATH, body) and await _answers(
                    "POST", up.floor_url + PATH_FLOOR_PATH, body
                )

            await _until("the stack's /readyz", ready, READY_WITHIN, crashes, logs)
            await _until("a routed answer", routed, READY_WITHIN, crashes, logs)
            await _until("the floor", floor_up, READY_WITHIN, crashes, logs)
            yield up
        finally:
            await supervisor.stop()


async def main(n: int, warmup: int, max_tokens: int) -> None:
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)  # clean up on SIGTERM too
    bodies, warm = request_bodies(n, max_tokens), request_bodies(warmup, max_tokens)
    async with running(max_tokens) as servers:
        print(
            f"gateway benchmark: routed requests (router and specialists: catalogue://tiny-llama, "
            f"{max_tokens} greedy tokens, non-streaming), {n} requests per level after {warmup} warm-up; "
            f"floor: Litestar -> NATS -> echo responder -> JSON",
            flush=True,
        )
        bus_transport.print_comparison(await bus_transport.compare(servers.nats_url, n, CONCURRENCY), max_tokens)
        for concurrency in CONCURRENCY:
            floor = await measure(servers.floor_url, FLOOR_PATH, bodies, warm, concurrency, check_floor)
            path = await measure(servers.floor_url, PATH_FLOOR_PATH, bodies, warm, concurrency, check_floor)
            nrt = await measure(servers.gateway_url, NRT_PATH, bodies, warm, concurrency, check_routed)
            if servers.crashes:
                raise SystemExit(f"a child process crashed during the run: {servers.crashes[0]}")
            _report(concurrency, floor, path, nrt)


def _report(concurrency: int, floor: Run, path: Run, nrt: Run) -> None:
    c = f"c={concurrency}"
    f50, f99 = floor.latency(50), floor.latency(99)
    report(f"floor {c}: latency p50", f50, "ms", precision=2)
    report(f"floor {c}: latency p99", f99, "ms", precision=2)
    report(f"floor {c}: throughput", floor.rate, "req/s")
    p50 = path.latency(50)
    report(f"path floor {c}: latency p50", p50, "ms", p50 / f50, "floor p50", precision=2)
    report(f"path floor {c}: throughput", path.rate, "req/s", path.rate / floor.rate, "floor")
    report(f"nrt routed {c}: latency p50", nrt.latency(50), "ms", nrt.latency(50) / f50, "floor p50", precision=2)
    report(f"nrt routed {c}: latency p99", nrt.latency(99), "ms", nrt.latency(99) / f99, "floor p99", precision=2)
    report(f"nrt routed {c}: throughput", nrt.rate, "req/s", nrt.rate / floor.rate, "floor")
    report(f"nrt routed {c}: model compute p50 (workers)", nrt.compute(50), "ms", precision=2)
    report(f"nrt routed {c}: overhead p50", nrt.overhead(50), "ms", nrt.overhead(50) / f50, "floor p50", TARGET, 2)
    report(f"nrt routed {c}: overhead p99", nrt.overhead(99), "ms", nrt.overhead(99) / f99, "floor p99", precision=2)
    report(
        f"nrt routed {c}: overhead p50 vs path floor",
        nrt.overhead(50),
        "ms",
        nrt.overhead(50) / p50,
        "path floor p50",
        precision=2,
    )
    shares = ", ".join(f"{model} {count / len(nrt.latencies_ms):.0%}" for model, count in sorted(nrt.targets.items()))
    print(f"nrt routed {c}: answered by {shares}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=200, help="measured requests per concurrency level")
    parser.add_argument("--warmup", type=int, default=32, help="warm-up requests before each level")
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--serve-floor", metavar="NATS_URL", help=argparse.SUPPRESS)
    parser.add_argument("--serve-echo", metavar="NATS_URL", help=argparse.SUPPRESS)
    parser.add_argument("--serve-router", metavar="NATS_URL", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_floor:
        asyncio.run(serve_floor(args.serve_floor, args.port))
    elif args.serve_echo:
        asyncio.run(serve_echo(args.serve_echo))
    elif args.serve_router:
        asyncio.run(serve_router(args.serve_router))
    else:
        try:
            asyncio.run(main(args.requests, args.warmup, args.max_tokens))
        except (asyncio.CancelledError, KeyboardInterrupt):
            sys.exit("bench.gateway: interrupted; every process it started is stopped")
