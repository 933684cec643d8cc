"""Serve routed requests: the reply subject belongs to the gateway and stays open.

Unlike ``rpc.serve_stream``, the handler does not end the stream: the worker that
answers streams its chunks, the last one marked as such, straight to the gateway's inbox. A
failing handler sends an error frame there instead, so the gateway never waits it out. The
handler is told when the request arrived (unix time), for the per-hop breakdown.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from nrt.adapters.bus import tracing
from nrt.adapters.bus.errors import BadRequest, RemoteError
from nrt.adapters.bus.rpc import StreamInbox
from nrt.core.protocol import RouteRequest

log = logging.getLogger("router_svc")
tracer = trace.get_tracer("router_svc")

RouteHandler = Callable[[RouteRequest, StreamInbox, float], Awaitable[None]]  # request, inbox, arrival (unix time)

_decoder = msgspec.json.Decoder(RouteRequest)


class RouteServer:
    """Subscribes ``subject`` in a queue group and runs ``handler`` for each request, concurrently."""

    def __init__(self, nc: Client, subject: str, handler: RouteHandler, queue: str) -> None:
        self.nc, self.subject, self.handler, self.queue = nc, subject, handler, queue
        self._tasks: set[asyncio.Task[None]] = set()
        self._sub: Subscription | None = None

    async def start(self) -> None:
        self._sub = await self.nc.subscribe(self.subject, queue=self.queue, cb=self._on_message)

    async def stop(self) -> None:
        """Stop taking requests; let the ones being routed finish."""
        if self._sub is not None:
            await self._sub.unsubscribe()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _on_message(self, msg: Msg) -> None:
        if not msg.reply:
            log.warning("dropping a routed request without a reply inbox")
            return
        task = asyncio.create_task(self._route(msg, time.time()))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _route(self, msg: Msg, received_at: float) -> None:
        inbox = StreamInbox(self.nc, msg.reply)
        with tracer.start_as_current_span(
            "router_svc route", context=tracing.extract(msg.headers), kind=SpanKind.SERVER
        ) as span:
            try:
                try:
                    request = _decoder.decode(msg.data)
                except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                    raise BadRequest(f"invalid RouteRequest: {exc}") from exc
                span.set_attribute("nrt.request_id", request.request_id)
                span.set_attribute("nrt.model", request.model)
                await self.handler(request, inbox, received_at)
            except Exception as exc:
                error = exc if isinstance(exc, RemoteError) else RemoteError("internal", f"{type(exc).__name__}: {exc}")
                if not isinstance(exc, RemoteError):
                    log.exception("routing failed", exc_info=exc)
                span.set_status(Status(StatusCode.ERROR, error.message))
                await inbox.fail(error)
