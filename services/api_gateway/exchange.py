"""One request on the bus: publish the RouteRequest with a fresh inbox, read the frames back.

router_svc answers on the inbox with a ``Dispatch`` frame (routed requests), then the
worker streams ``GenerateChunk`` frames and an ``end`` frame to the same inbox. Every
wait has a deadline: the first frame within ``route_timeout``, each next one within
``idle_timeout``, the whole request within ``request_timeout``. A missed deadline, an
error frame or a no-responders status raises RemoteError; nothing waits forever.
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
from nrt.protocol import Dispatch, InboxFrame, RouteRequest

_frames: msgspec.json.Decoder[Any] = msgspec.json.Decoder(InboxFrame)


class RouteExchange:
    def __init__(self, nc: Client, settings: GatewaySettings) -> None:
        self.nc, self.settings = nc, settings
        self.inbox = nc.new_inbox()
        self.queue: asyncio.Queue[Msg] = asyncio.Queue()
        self.source = subjects.ROUTE  # who is expected to speak next (for error messages)
        self.frames = 0
        self._sub: Subscription | None = None
        self._deadline = 0.0

    async def open(self, request: RouteRequest) -> None:
        """Subscribe the inbox and send ``request`` with the current trace context."""
        self._sub = await self.nc.subscribe(self.inbox, cb=self.queue.put)
        self._deadline = time.monotonic() + self.settings.request_timeout
        await self.nc.publish(subjects.ROUTE, rpc.encode(request), reply=self.inbox, headers=tracing.inject())

    async def next(self) -> InboxFrame | None:
        """The next frame, or None at the end of the answer."""
        wait = self.settings.route_timeout if self.frames == 0 else self.settings.idle_timeout
        remaining = self._deadline - time.monotonic()
        try:
            msg = await asyncio.wait_for(self.queue.get(), max(0.0, min(wait, remaining)))
        except TimeoutError:
            if remaining <= wait:
                raise DeadlineExceeded(
                    f"the request did not complete within {self.settings.request_timeout:g}s"
                ) from None
            which = "first reply" if self.frames == 0 else "next token"
            raise DeadlineExceeded(f"no {which} from {self.source} within {wait:g}s") from None
        self.frames += 1
        payload = rpc.frame_payload(msg, self.source)
        if payload is None:
            return None
        try:
            frame: InboxFrame = _frames.decode(payload)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise RemoteError("bad_reply", f"an invalid frame from {self.source}: {exc}", 502) from exc
        if isinstance(frame, Dispatch):
            self.source = subjects.infer(frame.target)
        return frame

    def expect(self, model: str) -> None:
        """A direct call: router_svc forwards it to ``model`` without a Dispatch frame."""
        self.source = f"{subjects.ROUTE} -> {subjects.infer(model)}"

    async def close(self) -> None:
        if self._sub is not None:
            sub, self._sub = self._sub, None
            await sub.unsubscribe()
