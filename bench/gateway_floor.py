"""The floor of ``bench.gateway``: bare Litestar -> NATS -> echo, doing no work, as child processes.

- ``floor_app``: a Litestar app served by uvicorn, as ``python -m api_gateway`` is (one process,
  on the event loop ``NRT_UVLOOP`` picks, as the services do). ``POST /v1/echo`` sends the body
  over NATS to the echo responder and returns JSON (two transits); ``POST /v1/echo-stream``
  sends it with an inbox of its own to the echo streamer, which streams ``tokens`` frames back,
  relayed as server-sent events (two transits to the first frame); ``POST /v1/routed-echo``
  sends it to the bare router, which forwards it to the echo responder with the app's inbox
  as reply subject (three transits: the shape of NRT's routed request path, doing no work).
- ``serve_echo``: the echo responder and the echo streamer (the "specialist").
- ``serve_router``: the bare router.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import msgspec
import uvicorn
from litestar import Litestar, post
from litestar.response import Stream
from nats.aio.client import Client
from nats.aio.msg import Msg

from nrt.adapters.bus.broker import DATA, FRAME, LAST
from nrt.adapters.bus.connection import connect
from nrt.adapters.settings import Settings
from nrt.entrypoints.service import run_loop

ECHO_SUBJECT = "bench.gateway.echo"
ECHO_STREAM_SUBJECT = "bench.gateway.echo-stream"
ROUTE_SUBJECT = "bench.gateway.route"
FLOOR_PATH = "/v1/echo"
FLOOR_STREAM_PATH = "/v1/echo-stream"
PATH_FLOOR_PATH = "/v1/routed-echo"
REQUEST_TIMEOUT = 60.0

_json = msgspec.json.Encoder()
_decode = msgspec.json.Decoder()


@dataclass
class _Bus:
    """The app's NATS connection and its streams' inboxes: one wildcard subscription, as the gateway has."""

    nc: Client | None = None
    prefix: str = ""
    queues: dict[str, asyncio.Queue[Msg]] = field(default_factory=dict)
    next: int = 0

    def connection(self) -> Client:
        assert self.nc is not None, "the app has not started"
        return self.nc

    async def deliver(self, msg: Msg) -> None:
        queue = self.queues.get(msg.subject)
        if queue is not None:
            queue.put_nowait(msg)

    def open(self) -> tuple[str, asyncio.Queue[Msg]]:
        self.next += 1
        inbox, queue = f"{self.prefix}.{self.next}", asyncio.Queue[Msg]()
        self.queues[inbox] = queue
        return inbox, queue


def floor_app(nats_url: str) -> Litestar:
    bus = _Bus()

    @contextlib.asynccontextmanager
    async def lifespan(_: Litestar) -> AsyncIterator[None]:
        bus.nc = await connect(nats_url, name="bench-floor")
        bus.prefix = bus.nc.new_inbox()
        await bus.nc.subscribe(f"{bus.prefix}.*", cb=bus.deliver)
        try:
            yield
        finally:
            await bus.nc.drain()

    @post(FLOOR_PATH, status_code=200)
    async def echo(data: dict[str, Any]) -> dict[str, Any]:
        reply = await bus.connection().request(ECHO_SUBJECT, _json.encode(data), timeout=REQUEST_TIMEOUT)
        return {"object": "echo", "echo": _decode.decode(reply.data)}

    @post(PATH_FLOOR_PATH, status_code=200)
    async def routed_echo(data: dict[str, Any]) -> dict[str, Any]:
        reply = await bus.connection().request(ROUTE_SUBJECT, _json.encode(data), timeout=REQUEST_TIMEOUT)
        return {"object": "echo", "echo": _decode.decode(reply.data)}

    @post(FLOOR_STREAM_PATH, status_code=200)
    async def echo_stream(data: dict[str, Any]) -> Stream:
        inbox, queue = bus.open()
        await bus.connection().publish(ECHO_STREAM_SUBJECT, _json.encode(data), reply=inbox)

        async def frames() -> AsyncIterator[bytes]:
            try:
                while True:
                    msg = await asyncio.wait_for(queue.get(), REQUEST_TIMEOUT)
                    yield b"data: " + msg.data + b"\n\n"
                    if (msg.headers or {}).get(FRAME) == LAST:
                        break
                yield b"data: [DONE]\n\n"
            finally:
                bus.queues.pop(inbox, None)

        return Stream(frames(), media_type="text/event-stream")

    return Litestar(route_handlers=[echo, routed_echo, echo_stream], lifespan=[lifespan])


async def serve_floor(nats_url: str, port: int) -> None:
    """Served like ``python -m api_gateway``: uvicorn, one process, on 127.0.0.1."""
    config = uvicorn.Config(floor_app(nats_url), host="127.0.0.1", port=port, log_level="warning")
    await uvicorn.Server(config).serve()


async def serve_echo(nats_url: str, tokens: int) -> None:
    """The echo responder (one reply) and the echo streamer (``tokens`` frames, the last marked)."""
    nc = await connect(nats_url, name="bench-echo")

    async def respond(msg: Msg) -> None:
        await msg.respond(msg.data)

    async def stream(msg: Msg) -> None:
        for i in range(tokens):
            frame = _json.encode({"choices": [{"delta": {"content": f" tok{i}"}}]})
            await nc.publish(msg.reply, frame, headers={FRAME: LAST if i == tokens - 1 else DATA})

    await nc.subscribe(ECHO_SUBJECT, cb=respond)
    await nc.subscribe(ECHO_STREAM_SUBJECT, cb=stream)
    await _until_signalled(nc)


async def serve_router(nats_url: str) -> None:
    """The path floor's router: forward to the echo responder with the caller's inbox (no work)."""
    nc = await connect(nats_url, name="bench-router")

    async def route(msg: Msg) -> None:
        await nc.publish(ECHO_SUBJECT, msg.data, reply=msg.reply)

    await nc.subscribe(ROUTE_SUBJECT, cb=route)
    await _until_signalled(nc)


async def _until_signalled(nc: Client) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await nc.drain()


def run(main: Any) -> None:
    """A floor process's body, on the event loop the services use (``NRT_UVLOOP``)."""
    run_loop(main, Settings.from_env().uvloop)
