"""One request on the bus: publish the RouteRequest with an inbox of its own, read the frames back.

The gateway subscribes once to a wildcard under its own inbox prefix (:class:`Inboxes`);
each request takes one subject below it. No SUB/UNSUB per request: in a NATS cluster those
would spread interest changes to every server for each request.

router_svc forwards the request to the model that answers with this inbox as reply subject:
that worker streams ``GenerateChunk`` frames here, the last one marked as such (or followed by
an ``end`` frame); the first chunk of a routed answer carries router_svc's ``Dispatch``. Every wait has a deadline: the first frame within
``route_timeout``, each next one within ``idle_timeout``, the whole request within
``request_timeout``. A missed deadline, an error frame or a no-responders status raises
RemoteError; nothing waits forever.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from api_gateway.settings import GatewaySettings
from nrt.bus import rpc, subjects, tracing
from nrt.bus.errors import DeadlineExceeded, RemoteError
from nrt.protocol import InboxFrame, RouteRequest

_frames: msgspec.json.Decoder[Any] = msgspec.json.Decoder(InboxFrame)


class Inboxes:
    """One wildcard subscription under this gateway's inbox prefix, fanned out to per-request queues."""

    def __init__(self, nc: Client) -> None:
        self.nc = nc
        self.prefix = nc.new_inbox()
        self._queues: dict[str, asyncio.Queue[Msg]] = {}
        self._sub: Subscription | None = None
        self._next = 0

    async def start(self) -> None:
        self._sub = await self.nc.subscribe(f"{self.prefix}.*", cb=self._deliver)

    async def _deliver(self, msg: Msg) -> None:
        queue = self._queues.get(msg.subject)
        if queue is not None:  # else: a frame for a request that has already ended
            queue.put_nowait(msg)

    def open(self) -> tuple[str, asyncio.Queue[Msg]]:
        self._next += 1
        inbox, queue = f"{self.prefix}.{self._next}", asyncio.Queue[Msg]()
        self._queues[inbox] = queue
        return inbox, queue

    def close(self, inbox: str) -> None:
        self._queues.pop(inbox, None)


class RouteExchange:
    def __init__(self, nc: Client, inboxes: Inboxes, settings: GatewaySettings) -> None:
        self.nc, self.inboxes, self.settings = nc, inboxes, settings
        self.inbox, self.queue = inboxes.open()
        # who is expected to speak next (for error messages): before the first chunk, router_svc or
        # the worker it forwarded the request to (the first chunk says which)
        self.source = f"{subjects.ROUTE} or the model it routed the request to"
        self.frames = 0
        self.finished = False  # the last frame has come
        self._deadline = time.monotonic() + settings.request_timeout

    async def open(self, request: RouteRequest) -> None:
        """Send ``request`` with the current trace context; the frames come back on our inbox."""
        await self.nc.publish(subjects.ROUTE, rpc.encode(request), reply=self.inbox, headers=tracing.inject())

    async def next(self) -> InboxFrame | None:
        """The next frame, or None at the end of the answer."""
        if self.finished:
            return None
        wait = self.settings.route_timeout if self.frames == 0 else self.settings.idle_timeout
        remaining = self._deadline - time.monotonic()
        try:
            async with asyncio.timeout(max(0.0, min(wait, remaining))):
                msg = await self.queue.get()
        except TimeoutError:
            if remaining <= wait:
                raise DeadlineExceeded(
                    f"the request did not complete within {self.settings.request_timeout:g}s"
                ) from None
            which = "first reply" if self.frames == 0 else "next token"
            raise DeadlineExceeded(f"no {which} from {self.source} within {wait:g}s") from None
        self.frames += 1
        payload, self.finished = rpc.frame_payload(msg, self.source)
        if payload is None:
            return None
        try:
            frame: InboxFrame = _frames.decode(payload)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise RemoteError("bad_reply", f"an invalid frame from {self.source}: {exc}", 502) from exc
        if frame.route is not None:
            self.source = subjects.infer(frame.route.target)
        return frame

    def expect(self, model: str) -> None:
        """A direct call: router_svc forwards it to ``model`` without a decision."""
        self.source = f"{subjects.ROUTE} -> {subjects.infer(model)}"

    def close(self) -> None:
        self.inboxes.close(self.inbox)
