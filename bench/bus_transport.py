"""The hot path's two subjects over FastStream and over raw nats-py, measured in the same run.

A routed request crosses ``nrt.route`` (gateway -> router_svc) and then streams its answer
from the worker straight to the gateway's inbox. Both are measured here doing no work, so
that only the transport differs: a client (the gateway's part) sends a RouteRequest-sized
message with its inbox as the reply subject; a router (another process) forwards it to a
worker subject with the same reply inbox; the worker streams ``tokens`` frames, the last
one marked ``last``, to that inbox; the client waits for the last frame.

- raw: nats-py ``publish`` / ``subscribe`` callbacks, as ``nrt.adapters.bus.rpc`` does;
- faststream: ``NatsBroker`` subscribers (msgspec models, the NRT middlewares) and
  ``broker.publish``, as the control plane does.

NRT keeps FastStream on the hot path only if its p50 is within 10% of raw's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import sys
import time
from typing import Any

import msgspec
import numpy as np
from faststream.nats import NatsBroker
from nats.aio.msg import Msg

from bench.common import report
from nrt.adapters.bus.broker import FRAME, LAST, start_broker
from nrt.adapters.bus.connection import connect
from nrt.core.protocol import ChatMessage, GenerateChunk, RouteRequest

ROUTE = "bench.bus.{mode}.route"
INFER = "bench.bus.{mode}.infer"
MODES = ("raw", "faststream")
WITHIN_OF_RAW = 1.10  # FastStream must be at least this close to raw to take the hot path

_encode = msgspec.json.encode


def _request(i: int) -> RouteRequest:
    text = "The app crashes when I upload a file"
    return RouteRequest(
        request_id=f"r{i}",
        manifest_version=1,
        model="router",
        messages=(ChatMessage(role="user", content=text),),
    )


def _chunk(i: int) -> GenerateChunk:
    return GenerateChunk(request_id="r", model_id="billing", worker_id="w", text=f" tok{i}", token_ids=(i,))


# -- the services' side (one child process) ----------------------------------------------------


async def serve_raw(nats_url: str, tokens: int) -> list[Any]:
    router = await connect(nats_url, name="bench-bus-router")
    worker = await connect(nats_url, name="bench-bus-worker")

    async def route(msg: Msg) -> None:
        request = msgspec.json.decode(msg.data, type=RouteRequest)
        await router.publish(INFER.format(mode="raw"), _encode(request), reply=msg.reply)

    async def infer(msg: Msg) -> None:
        msgspec.json.decode(msg.data, type=RouteRequest)
        for i in range(tokens):
            last = i == tokens - 1
            await worker.publish(msg.reply, _encode(_chunk(i)), headers={FRAME: LAST if last else "data"})

    await router.subscribe(ROUTE.format(mode="raw"), cb=route)
    await worker.subscribe(INFER.format(mode="raw"), cb=infer)
    return [router, worker]


async def serve_faststream(nats_url: str, tokens: int) -> list[Any]:
    router = await start_broker(nats_url, "bench-bus-router")
    worker = await start_broker(nats_url, "bench-bus-worker")

    async def route(request: RouteRequest) -> None:
        reply_to = router.context.get("message").reply_to
        await router.publish(request, INFER.format(mode="faststream"), reply_to=reply_to)

    async def infer(request: RouteRequest) -> None:
        reply_to = worker.context.get("message").reply_to
        for i in range(tokens):
            last = i == tokens - 1
            await worker.publish(_chunk(i), reply_to, headers={FRAME: LAST if last else "data"})

    for broker, subject, handler in ((router, ROUTE, route), (worker, INFER, infer)):
        # concurrently, as the raw side handles each message in its own callback task
        subscriber = broker.subscriber(subject.format(mode="faststream"), no_reply=True, max_workers=16)
        subscriber(handler)
        await subscriber.start()
    return [router, worker]


async def serve(nats_url: str, tokens: int) -> None:
    """Both transports' router and worker, until SIGTERM."""
    held = [*(await serve_raw(nats_url, tokens)), *(await serve_faststream(nats_url, tokens))]
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()
    for connection in held:
        await (connection.stop() if isinstance(connection, NatsBroker) else connection.drain())


# -- the client's side (the gateway's part) ---------------------------------------------------


@dataclasses.dataclass
class Side:
    """Sends a request with an inbox and resolves when that inbox got its last frame."""

    mode: str
    send: Any
    waiting: dict[str, asyncio.Future[None]] = dataclasses.field(default_factory=dict)

    def deliver(self, subject: str, last: bool) -> None:
        """A frame arrived on ``subject`` (``<prefix>.<key>``); the last one resolves the request."""
        if last and (future := self.waiting.pop(subject.rsplit(".", 1)[1], None)) is not None:
            future.set_result(None)


async def _raw_client(nats_url: str) -> tuple[Side, Any]:
    nc = await connect(nats_url, name="bench-bus-client-raw")
    prefix = nc.new_inbox()
    side = Side("raw", None)

    async def on_frame(msg: Msg) -> None:
        msgspec.json.decode(msg.data, type=GenerateChunk)
        side.deliver(msg.subject, (msg.headers or {}).get(FRAME) == LAST)

    await nc.subscribe(f"{prefix}.*", cb=on_frame)

    async def send(i: int, inbox: str) -> None:
        await nc.publish(ROUTE.format(mode="raw"), _encode(_request(i)), reply=f"{prefix}.{inbox}")

    side.send = send
    return side, nc


async def _faststream_client(nats_url: str) -> tuple[Side, Any]:
    broker = await start_broker(nats_url, "bench-bus-client-faststream")
    prefix = broker.connection.new_inbox()
    side = Side("faststream", None)

    async def on_frame(chunk: GenerateChunk) -> None:
        message = broker.context.get("message")
        side.deliver(message.raw_message.subject, (message.headers or {}).get(FRAME) == LAST)

    subscriber = broker.subscriber(f"{prefix}.*", no_reply=True)
    subscriber(on_frame)
    await subscriber.start()

    async def send(i: int, inbox: str) -> None:
        await broker.publish(_request(i), ROUTE.format(mode="faststream"), reply_to=f"{prefix}.{inbox}")

    side.send = send
    return side, broker


async def _drive(side: Side, n: int, concurrency: int) -> list[float]:
    latencies: list[float] = []
    numbers = iter(range(n))

    async def caller() -> None:
        for i in numbers:
            inbox = f"i{i}"
            future = asyncio.get_running_loop().create_future()
            side.waiting[inbox] = future
            started = time.perf_counter()
            await side.send(i, inbox)
            await asyncio.wait_for(future, 10)
            latencies.append((time.perf_counter() - started) * 1e6)

    await asyncio.gather(*(caller() for _ in range(concurrency)))
    return latencies


async def compare(nats_url: str, n: int, concurrency_levels: tuple[int, ...]) -> dict[tuple[str, int], float]:
    """p50 (us) of a route + token stream per (mode, concurrency), the modes interleaved per level."""
    raw, raw_conn = await _raw_client(nats_url)
    fs, fs_conn = await _faststream_client(nats_url)
    p50: dict[tuple[str, int], float] = {}
    try:
        for concurrency in concurrency_levels:
            samples: dict[str, list[float]] = {mode: [] for mode in MODES}
            for _ in range(3):  # interleave, so both see the same machine
                for side in (raw, fs):
                    await _drive(side, n // 10, concurrency)  # warm-up
                    samples[side.mode] += await _drive(side, n // 3, concurrency)
            for mode in MODES:
                p50[(mode, concurrency)] = float(np.percentile(samples[mode], 50))
    finally:
        await raw_conn.drain()
        await fs_conn.stop()
    return p50


def print_comparison(p50: dict[tuple[str, int], float], tokens: int) -> bool:
    """Print the figures; True when FastStream is within 10% of raw at every level."""
    print(f"hot path transport: nrt.route + a {tokens}-frame token stream, no work, FastStream vs raw nats-py")
    fits = True
    for concurrency in sorted({c for _, c in p50}):
        raw, fs = p50[("raw", concurrency)], p50[("faststream", concurrency)]
        report(f"bus c={concurrency}: raw route+stream p50", raw, "us")
        report(
            f"bus c={concurrency}: faststream route+stream p50",
            fs,
            "us",
            fs / raw,
            "raw",
            f"≤ {WITHIN_OF_RAW:.2f} to use it",
            2,
        )
        fits = fits and fs / raw <= WITHIN_OF_RAW
    verdict = "FastStream" if fits else "raw nats-py (nrt.adapters.bus.rpc)"
    print(f"hot path transport: {verdict} for nrt.route and the token stream", flush=True)
    return fits


if __name__ == "__main__":  # the services' side, as a child process of bench.gateway
    asyncio.run(serve(sys.argv[1], int(sys.argv[2])))
