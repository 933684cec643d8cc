"""Gateway benchmark: routed requests through the whole stack against a bare Litestar -> NATS floor.

1. NRT: the real stack as ``nrt up`` runs it: cluster_state, specialist_worker, router_svc and
   api_gateway, each its own process under ``nrt.entrypoints.stack.supervisor``, on a small manifest whose
   router and specialists are the catalogue's random 2-layer Llama (``catalogue://tiny-llama``,
   prepared in seconds the first time, then cached under NRT_HOME). Every request is routed
   (``model="router"``): gateway -> router_svc, which hosts the router model and classifies in its
   own process -> the specialist generates ``--max-tokens`` greedy tokens -> gateway: three transits.
2. Floor, in the same run, on the same NATS server and with the same client: a bare Litestar app,
   served by uvicorn as the gateway is and on the same event loop, whose POST route sends the
   body over NATS to an echo responder in another process and returns JSON (two transits); its
   streaming route relays an echo streamer's frames as server-sent events.
3. Path floor, for reference: the same bare pieces along NRT's request path, doing no work: the
   app sends the body to a bare router process, which forwards it to the echo responder with
   the app's reply inbox (three transits, as a routed request crosses).
4. Orchestration overhead of each request: its end-to-end latency minus the model compute the
   workers report in the response's ``nrt`` block (the router's classification plus the
   specialist's generation, ``nrt.hops[].compute_ms``), against the floor's latency at the same
   concurrency. Targets: at most 2.0x at concurrency 1, 2.5x at 16; routed throughput at 16 at
   least 0.5x the floor's.
5. Streaming: the time to the first content token at the client minus the specialist's own time
   to its first chunk (``nrt.hops[1].own_ttft_ms``: the request's arrival at its worker to the
   chunk leaving it), against the floor's time to its first streamed frame. Target at
   concurrency 1: at most 2.0x.
6. Events: the JetStream publishes and the PostgreSQL rows per routed request (counted around the
   concurrency-1 run, once cluster_state has recorded everything), by event type.
7. The per-hop breakdown of a routed request from the same run: each transit and each service's
   own work, from the stamps the frames carry (``nrt.breakdown``), p50 per part.
8. The hot path's transport: ``nrt.route`` plus a token stream to the caller's inbox, doing no
   work, over FastStream and over raw nats-py (``bench.bus_transport``), in the same run.

``--key-rps R`` gives the bench's API key a limit of ``R`` requests per second (and ``--key-tokens-per-min``
a token limit), recorded by the bench itself before the services start (its ``ApiKeyCreated`` with the limits),
so that every request goes through the gateway's rate limiter: set them far above what the run sends to
measure the limiter's cost on the hot path (without them the key has no limits and the limiter is skipped).

``--event-loop asyncio`` runs the services and the floor on asyncio's own loop instead of uvloop
(``NRT_UVLOOP=0``): run both to compare. ``--ort-threads`` sets the ONNX Runtime intra-op threads
of the router's and the specialists' sessions (``NRT_ROUTER_ORT_THREADS``, ``NRT_WORKER_ORT_THREADS``):
1 by default, the size of these tiny models on a host that runs seven processes (``0``: ONNX
Runtime's own default, a thread per core). Every target is printed with its value; the last lines
say which were met and, for a missed one, by how much.

Uses NRT_NATS_URL / NRT_DATABASE_URL when set (that NATS must not serve another NRT stack; the
events go to a fresh database on that PostgreSQL server), else embedded servers; every process
it starts is stopped at the end. The services and the floor log at WARNING.

    python -m bench.gateway [--requests 200] [--warmup 32] [--max-tokens 8] [--event-loop uvloop|asyncio]
                            [--ort-threads 1] [--key-rps R] [--key-tokens-per-min T]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import math
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import httpx
import msgspec
import nats
import psycopg

from bench import bus_transport, gateway_floor
from bench.common import fresh_database, postgres, report
from bench.gateway_client import (
    BENCH_API_KEY,
    JSON_HEADERS,
    Run,
    check_floor,
    check_routed,
    measure,
    posting,
    request_bodies,
    stream_floor,
    stream_routed,
)
from bench.gateway_floor import FLOOR_PATH, FLOOR_STREAM_PATH, PATH_FLOOR_PATH
from nrt.adapters.bus import subjects
from nrt.adapters.bus.jetstream import EventPublisher, ensure_events_stream
from nrt.adapters.catalogue import prepare
from nrt.adapters.infra import free_port
from nrt.adapters.infra.pgurl import to_libpq
from nrt.core.api_keys import bootstrap_event
from nrt.core.vocabulary import KeyScope
from nrt.entrypoints.cli.up import SERVICES
from nrt.entrypoints.stack.supervisor import Supervisor
from nrt.testing.servers import nats_server

CONCURRENCY = (1, 16)
NRT_PATH = "/v1/chat/completions"
READY_WITHIN = 120.0  # each start-up step: /readyz green, a routed answer, the floor's answer
RECORDED_WITHIN = 60.0  # for cluster_state to record what the run published

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
  router:
    source: "catalogue://tiny-llama"
    tier: resident
    priority: critical
    confidence_threshold: 0.0  # trust the random router's best label: every request reaches a specialist
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


@dataclasses.dataclass(frozen=True)
class Target:
    name: str
    ratio: float
    limit: float
    at_most: bool  # the ratio must be at most the limit (else at least)

    @property
    def met(self) -> bool:
        return self.ratio <= self.limit if self.at_most else self.ratio >= self.limit

    def line(self) -> str:
        bound = f"{'≤' if self.at_most else '≥'} {self.limit:.1f}"
        if self.met:
            verdict = "met"
        else:
            off = self.ratio - self.limit if self.at_most else self.limit - self.ratio
            verdict = f"MISSED by {off:.2f} ({off / self.limit:.0%})"
        return f"target {self.name:<44} {self.ratio:6.2f}x the floor (target {bound}): {verdict}"


# -- events per request ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Recorded:
    """What the events stream and the PostgreSQL log hold at one moment."""

    published: int  # JetStream messages in the events stream
    rows: int  # rows of the PostgreSQL log
    by_type: Counter[str]


async def recorded(nats_url: str, database_url: str, settle_within: float = RECORDED_WITHIN) -> Recorded:
    """The stream and the log once cluster_state has recorded every message the stream holds."""
    nc = await nats.connect(nats_url)
    try:
        deadline = time.monotonic() + settle_within
        while True:
            published = (await nc.jetstream().stream_info(subjects.EVENTS_STREAM)).state.messages
            by_type = await asyncio.to_thread(_rows_by_type, database_url)
            rows = sum(by_type.values())
            if rows >= published or time.monotonic() > deadline:
                return Recorded(published, rows, by_type)
            await asyncio.sleep(0.2)
    finally:
        await nc.close()


def _rows_by_type(database_url: str) -> Counter[str]:
    with psycopg.connect(to_libpq(database_url)) as conn:
        return Counter({str(t): int(n) for t, n in conn.execute("SELECT type, count(*) FROM events GROUP BY type")})


def report_events(before: Recorded, after: Recorded, requests: int) -> None:
    published = (after.published - before.published) / requests
    rows = (after.rows - before.rows) / requests
    kinds = ", ".join(
        f"{kind} {(after.by_type[kind] - before.by_type[kind]) / requests:.2f}"
        for kind in sorted(after.by_type)
        if after.by_type[kind] != before.by_type[kind]
    )
    print(f"events per routed request ({requests} requests, every one recorded by cluster_state):", flush=True)
    report("events: JetStream publishes per routed request", published, "", precision=2)
    report("events: PostgreSQL rows per routed request", rows, "", precision=2)
    print(f"events: by type per routed request: {kinds}", flush=True)


# -- the per-hop breakdown ---------------------------------------------------------------------

BREAKDOWN = (
    ("client <-> gateway: HTTP in and out", None),
    ("gateway: admit, validate, send the route request", "gateway_in_ms"),
    ("transit: gateway -> router_svc", "to_router_ms"),
    ("router_svc: own work (classification included)", "router_ms"),
    ("transit: router_svc -> specialist", "to_worker_ms"),
    ("specialist: own work (generation included)", "worker_ms"),
    ("transit: specialist -> gateway", "back_ms"),
    ("gateway: shape the answer", "gateway_out_ms"),
)


FIRST_TOKEN = (
    ("gateway: admit, validate, send the route request", "gateway_in_ms"),
    ("transit: gateway -> router_svc", "to_router_ms"),
    ("router_svc: own work (classification included)", "router_ms"),
    ("transit: router_svc -> specialist", "to_worker_ms"),
    ("specialist: own work to its first chunk", "worker_first_ms"),
    ("transit: the first chunk, specialist -> gateway", "first_back_ms"),
)


def report_first_token(concurrency: int, stream: Run) -> None:
    """Where a streamed answer's first token waits, hop by hop; the rest is HTTP and the client."""
    print(f"per-hop breakdown to the first token, nrt stream c={concurrency} (p50 of each part, ms):", flush=True)
    parts = 0.0
    for label, part in FIRST_TOKEN:
        value = stream.part(part, 50)
        parts += value
        report(f"  {label}", value, "ms", precision=3)
    report("  client <-> gateway: HTTP in, SSE out (the rest)", stream.latency(50) - parts, "ms", precision=3)
    report("  first content token at the client", stream.latency(50), "ms", precision=3)


def report_breakdown(concurrency: int, nrt: Run) -> None:
    print(f"per-hop breakdown, nrt routed c={concurrency} (p50 of each part over the run, ms):", flush=True)
    for label, part in BREAKDOWN:
        value = nrt.http_ms(50) if part is None else nrt.part(part, 50)
        report(f"  {label}", value, "ms", precision=3)
    report("  of which: router classification compute", nrt.router_compute(50), "ms", precision=3)
    report("  of which: model compute, router + specialist", nrt.compute(50), "ms", precision=3)
    report("  whole request at the client", nrt.latency(50), "ms", precision=3)


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
    database_url: str
    gateway_url: str  # the NRT stack's api_gateway
    floor_url: str  # the bare Litestar app
    crashes: list[str]  # children that exited on their own (the supervisor restarts them)


@dataclasses.dataclass(frozen=True)
class KeyLimits:
    """The limits of the bench's API key (None: none)."""

    rps: float | None = None
    tokens_per_min: int | None = None

    @property
    def any(self) -> bool:
        return self.rps is not None or self.tokens_per_min is not None


async def record_limited_key(nats_url: str, limits: KeyLimits) -> None:
    """Record the bench's key with ``limits``, as cluster_state records a key given at start (same event id)."""
    nc = await nats.connect(nats_url)
    try:
        event = bootstrap_event(BENCH_API_KEY, KeyScope.INFER, name="bench (limited)")
        limited = msgspec.structs.replace(event, rps=limits.rps, tokens_per_min=limits.tokens_per_min)
        await EventPublisher(nc).publish(limited)
    finally:
        await nc.close()


@contextlib.asynccontextmanager
async def running(
    max_tokens: int, uvloop: bool, ort_threads: int = 1, key_limits: KeyLimits = KeyLimits()
) -> AsyncIterator[Servers]:
    """NATS, a fresh migrated PostgreSQL database, the four services on the bench manifest (started
    in ``nrt up``'s order by its supervisor) and the floor's processes; yields once a routed request
    and the floor's requests have been answered, and stops every process on the way out."""
    await asyncio.to_thread(prepare, "tiny-llama")  # cached under NRT_HOME after the first time
    loop = {"NRT_UVLOOP": "1" if uvloop else "0"}
    with contextlib.ExitStack() as servers:
        tmp = Path(servers.enter_context(tempfile.TemporaryDirectory(prefix="nrt-bench-gateway-")))
        nats_url = servers.enter_context(nats_server(tmp / "nats", env_var="NRT_NATS_URL", use_docker=False))
        database_url = servers.enter_context(fresh_database(servers.enter_context(postgres())))
        nc = await nats.connect(nats_url)  # the events stream before the services, as `nrt up` does
        await ensure_events_stream(nc.jetstream())
        await nc.close()
        if key_limits.any:  # recorded before cluster_state: its own bootstrap of the same key is a duplicate
            await record_limited_key(nats_url, key_limits)
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
                # the gateway checks every request's key, as deployed (a limited key is recorded above)
                **({} if key_limits.any else {"NRT_API_KEY": BENCH_API_KEY}),
                "NRT_GATEWAY_HOST": "127.0.0.1",
                "NRT_GATEWAY_PORT": str(gateway_port),
                "NRT_LOG_LEVEL": "WARNING",
                "NRT_ROUTER_ORT_THREADS": str(ort_threads or ""),  # empty: ONNX Runtime's default
                "NRT_WORKER_ORT_THREADS": str(ort_threads or ""),
                **loop,
            }
            for service in SERVICES:
                await supervisor.start(supervisor.python_module(service, service, env))
            floors = {
                "floor-echo": ["--serve-echo", nats_url, "--max-tokens", str(max_tokens)],
                "floor-router": ["--serve-router", nats_url],
                "floor-litestar": ["--serve-floor", nats_url, "--port", str(floor_port)],
            }
            for name, args in floors.items():
                await supervisor.start(supervisor.python_module(name, "bench.gateway", loop, args))
            bus = [nats_url, str(max_tokens)]
            await supervisor.start(supervisor.python_module("bus-transport", "bench.bus_transport", {}, bus))
            up = Servers(
                nats_url,
                database_url,
                f"http://127.0.0.1:{gateway_port}",
                f"http://127.0.0.1:{floor_port}",
                crashes,
            )
            body = request_bodies(PROMPTS, 1, max_tokens)[0]

            async def ready() -> bool:
                return await _answers("GET", up.gateway_url + "/readyz")

            async def routed() -> bool:
                return await _answers("POST", up.gateway_url + NRT_PATH, body)

            async def floor_up() -> bool:
                paths = (FLOOR_PATH, PATH_FLOOR_PATH, FLOOR_STREAM_PATH)
                return all([await _answers("POST", up.floor_url + path, body) for path in paths])

            await _until("the stack's /readyz", ready, READY_WITHIN, crashes, logs)
            await _until("a routed answer", routed, READY_WITHIN, crashes, logs)
            await _until("the floor", floor_up, READY_WITHIN, crashes, logs)
            yield up
        finally:
            await supervisor.stop()


# -- the run ------------------------------------------------------------------------------------


async def main(
    n: int, warmup: int, max_tokens: int, uvloop: bool, ort_threads: int, key_limits: KeyLimits = KeyLimits()
) -> None:
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)  # clean up on SIGTERM too
    bodies, warm = request_bodies(PROMPTS, n, max_tokens), request_bodies(PROMPTS, warmup, max_tokens)
    streamed, streamed_warm = (
        request_bodies(PROMPTS, n, max_tokens, stream=True),
        request_bodies(PROMPTS, warmup, max_tokens, stream=True),
    )
    floor_once, nrt_once = posting(check_floor), posting(check_routed)
    targets: list[Target] = []
    async with running(max_tokens, uvloop, ort_threads, key_limits) as servers:
        threads = f"{ort_threads} intra-op thread(s)" if ort_threads else "ONNX Runtime's default threads"
        print(
            f"gateway benchmark: routed requests (router and specialists: catalogue://tiny-llama, {max_tokens} "
            f"greedy tokens, {threads} per session), {n} requests per level after {warmup} warm-up; services and "
            f"floor on {'uvloop' if uvloop else 'asyncio'}; floor: Litestar -> NATS -> echo responder -> JSON",
            flush=True,
        )
        limited = f"rps {key_limits.rps}, tokens per minute {key_limits.tokens_per_min}" if key_limits.any else "none"
        print(f"the bench key's rate limits: {limited}", flush=True)
        bus_transport.print_comparison(await bus_transport.compare(servers.nats_url, n, CONCURRENCY), max_tokens)
        for concurrency in CONCURRENCY:
            floor = await measure(servers.floor_url, FLOOR_PATH, bodies, warm, concurrency, floor_once)
            path = await measure(servers.floor_url, PATH_FLOOR_PATH, bodies, warm, concurrency, floor_once)
            before = await recorded(servers.nats_url, servers.database_url) if concurrency == 1 else None
            nrt = await measure(servers.gateway_url, NRT_PATH, bodies, warm, concurrency, nrt_once)
            if before is not None:
                report_events(before, await recorded(servers.nats_url, servers.database_url), n + warmup)
            floor_stream = await measure(
                servers.floor_url, FLOOR_STREAM_PATH, streamed, streamed_warm, concurrency, stream_floor
            )
            nrt_stream = await measure(
                servers.gateway_url, NRT_PATH, streamed, streamed_warm, concurrency, stream_routed
            )
            if servers.crashes:
                raise SystemExit(f"a child process crashed during the run: {servers.crashes[0]}")
            targets += _report(concurrency, floor, path, nrt, floor_stream, nrt_stream)
            report_breakdown(concurrency, nrt)
            report_first_token(concurrency, nrt_stream)
    print("targets of issue 13 (this run):", flush=True)
    for target in targets:
        print(target.line(), flush=True)
    missed = [t.name for t in targets if not t.met]
    print(
        f"targets: {len(targets) - len(missed)} of {len(targets)} met"
        + (f"; missed: {', '.join(missed)}" if missed else "")
    )


def _report(concurrency: int, floor: Run, path: Run, nrt: Run, floor_stream: Run, nrt_stream: Run) -> list[Target]:
    c = f"c={concurrency}"
    f50, f99 = floor.latency(50), floor.latency(99)
    report(f"floor {c}: latency p50", f50, "ms", precision=2)
    report(f"floor {c}: latency p99", f99, "ms", precision=2)
    report(f"floor {c}: throughput", floor.rate, "req/s")
    p50 = path.latency(50)
    report(f"path floor {c} (3 transits): latency p50", p50, "ms", p50 / f50, "floor p50", precision=2)
    report(f"path floor {c}: throughput", path.rate, "req/s", path.rate / floor.rate, "floor")
    report(f"nrt routed {c}: latency p50", nrt.latency(50), "ms", nrt.latency(50) / f50, "floor p50", precision=2)
    report(f"nrt routed {c}: latency p99", nrt.latency(99), "ms", nrt.latency(99) / f99, "floor p99", precision=2)
    report(f"nrt routed {c}: model compute p50 (workers)", nrt.compute(50), "ms", precision=2)
    overhead = Target(f"overhead p50 c={concurrency}", nrt.overhead(50) / f50, 2.0 if concurrency == 1 else 2.5, True)
    report(f"nrt routed {c}: overhead p50", nrt.overhead(50), "ms", overhead.ratio, "floor p50", precision=2)
    report(f"nrt routed {c}: overhead p99", nrt.overhead(99), "ms", nrt.overhead(99) / f99, "floor p99", precision=2)
    report(
        f"nrt routed {c}: overhead p50 vs path floor",
        nrt.overhead(50),
        "ms",
        nrt.overhead(50) / p50,
        "path floor p50",
        precision=2,
    )
    throughput = Target(f"routed throughput c={concurrency}", nrt.rate / floor.rate, 0.5, False)
    report(f"nrt routed {c}: throughput", nrt.rate, "req/s", throughput.ratio, "floor")
    shares = ", ".join(f"{model} {count / len(nrt.samples):.0%}" for model, count in sorted(nrt.targets.items()))
    print(f"nrt routed {c}: answered by {shares}", flush=True)
    s50 = floor_stream.latency(50)
    report(f"floor stream {c}: first frame p50", s50, "ms", precision=2)
    report(
        f"nrt stream {c}: first content token p50",
        nrt_stream.latency(50),
        "ms",
        nrt_stream.latency(50) / s50,
        "floor",
        precision=2,
    )
    report(f"nrt stream {c}: specialist's own ttft p50", nrt_stream.own_ttft(50), "ms", precision=2)
    report(f"nrt stream {c}: router classification p50", nrt_stream.router_compute(50), "ms", precision=2)
    first = Target(
        f"streaming first-token overhead p50 c={concurrency}", nrt_stream.first_token_overhead(50) / s50, 2.0, True
    )
    report(
        f"nrt stream {c}: first-token overhead p50",
        nrt_stream.first_token_overhead(50),
        "ms",
        first.ratio,
        "floor first frame",
        precision=2,
    )
    if math.isnan(nrt.part("router_ms")):
        raise SystemExit("nrt: the answers carry no breakdown")
    if concurrency == 1:  # the targets: overhead at 1 and 16, throughput at 16, first token at 1
        return [overhead, first]
    print(f"(streaming first-token overhead at {c}: {first.ratio:.2f}x the floor; no target at {c})", flush=True)
    return [overhead, throughput]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=200, help="measured requests per concurrency level")
    parser.add_argument("--warmup", type=int, default=32, help="warm-up requests before each level")
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument(
        "--event-loop", choices=("uvloop", "asyncio"), default="uvloop", help="the services' and the floor's loop"
    )
    parser.add_argument(
        "--ort-threads", type=int, default=1, help="ONNX Runtime intra-op threads per session (0: its default)"
    )
    parser.add_argument("--key-rps", type=float, default=None, help="the bench key's requests-per-second limit")
    parser.add_argument("--key-tokens-per-min", type=int, default=None, help="the bench key's tokens-per-minute limit")
    parser.add_argument("--serve-floor", metavar="NATS_URL", help=argparse.SUPPRESS)
    parser.add_argument("--serve-echo", metavar="NATS_URL", help=argparse.SUPPRESS)
    parser.add_argument("--serve-router", metavar="NATS_URL", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_floor:
        gateway_floor.run(gateway_floor.serve_floor(args.serve_floor, args.port))
    elif args.serve_echo:
        gateway_floor.run(gateway_floor.serve_echo(args.serve_echo, args.max_tokens))
    elif args.serve_router:
        gateway_floor.run(gateway_floor.serve_router(args.serve_router))
    else:
        try:
            uvloop = args.event_loop == "uvloop"
            limits = KeyLimits(args.key_rps, args.key_tokens_per_min)
            asyncio.run(main(args.requests, args.warmup, args.max_tokens, uvloop, args.ort_threads, limits))
        except (asyncio.CancelledError, KeyboardInterrupt):
            sys.exit("bench.gateway: interrupted; every process it started is stopped")
