"""One request on the bus: publish the RouteRequest with an inbox of its own, read the frames back.

The gateway subscribes once to a wildcard under its own inbox prefix (:class:`Inboxes`);
each request takes one subject below it. No SUB/UNSUB per request: in a NATS cluster those
would spread interest changes to every server for each request.

router_svc forwards the request to the model that answers with this inbox as reply subject:
that worker streams ``GenerateChunk`` frames here, the last one marked as such (or followed by
an ``end`` frame); the first chunk of a routed answer carries router_svc's ``Dispatch``. Before
them, the worker says it has taken the request (an ``accepted`` frame with its id and the
model's decode speed there). Every wait has a deadline (``api_gateway.deadlines``), the whole
request ``request_timeout``, which travels with it so the worker stops there too. A missed
deadline, an error frame or a no-responders status raises RemoteError; nothing waits forever.

When the event log says a worker is lost (:meth:`Inboxes.worker_lost`), each request on it
ends at once with a ``worker_lost`` error, as does each request no worker has taken yet that
was sent a moment before (it may have been forwarded to the lost worker): the caller may
retry such a request elsewhere when nothing of its answer has come yet (:class:`WorkerLost` names
the worker, which the retry asks router_svc to avoid).

When a worker's heartbeat says its NATS connection was made again (:meth:`Inboxes.worker_reconnected`:
its server went away; router_svc is a worker too), the requests it had taken and those no worker has taken
yet end the same way: a request sent to it, or a frame it sent, may have gone with that server.

When the gateway's NATS connection drops (:meth:`Inboxes.bus_lost`), every request in flight
ends at once with a 503 ``bus_lost`` error: a frame the server held when it went away is gone
for good, so waiting for one would end only at a deadline. A request sent while the connection
is down is refused with ``not_ready`` before it is sent.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from api_gateway.deadlines import next_frame_timeout
from api_gateway.settings import GatewaySettings
from nrt.adapters.bus import rpc, subjects, tracing
from nrt.adapters.bus.errors import DeadlineExceeded, RemoteError, model_unavailable
from nrt.core.protocol import Accepted, InboxFrame, RouteRequest
from nrt.core.routing import serving_workers
from nrt.core.state import ClusterState

_frames: msgspec.json.Decoder[Any] = msgspec.json.Decoder(InboxFrame)
_accepted = msgspec.json.Decoder(Accepted)

WORKER_LOST = "worker_lost"  # the error code of a request whose worker was lost
WORKER_LOST_RETRY_AFTER_S = 2.0  # a lost worker's models are back once it restarts, or are placed elsewhere
UNTAKEN_GRACE_S = 0.25  # a request sent this long before a worker is lost, and taken by none, may have gone to it
BUS_LOST = "bus_lost"  # the error code of a request in flight when the gateway's NATS connection dropped
BUS_RETRY_AFTER_S = 1.0  # the connection is tried again every second (nrt.adapters.bus.connection)


class WorkerLost(RemoteError):
    """A request's worker (or, for a request no worker had taken, a worker it may have gone to) was lost."""

    def __init__(self, worker_id: str, message: str) -> None:
        super().__init__(WORKER_LOST, message, 503, WORKER_LOST_RETRY_AFTER_S)
        self.worker_id = worker_id


def require_serving(state: ClusterState, model_id: str) -> None:
    """503 with Retry-After at once, not after a timeout, when no live worker serves ``model_id``."""
    if not serving_workers(state, model_id):
        raise model_unavailable(model_id)


def not_connected(nats_url: str) -> RemoteError:
    """The 503 of a request that meets the gateway while its NATS connection is down."""
    return RemoteError("not_ready", f"the gateway is not connected to NATS at {nats_url}", 503, BUS_RETRY_AFTER_S)


Frame = Msg | RemoteError  # a message on the inbox, or an error the gateway itself puts there


class Inboxes:
    """One wildcard subscription under this gateway's inbox prefix, fanned out to per-request queues."""

    def __init__(self, nc: Client) -> None:
        self.nc = nc
        self.prefix = nc.new_inbox()
        self._queues: dict[str, asyncio.Queue[Frame]] = {}
        self._opened: dict[str, float] = {}  # inbox -> time.monotonic() when it was opened
        self._workers: dict[str, str] = {}  # inbox -> the worker that took its request
        self._sub: Subscription | None = None
        self._next = 0

    async def start(self) -> None:
        self._sub = await self.nc.subscribe(f"{self.prefix}.*", cb=self._deliver)

    async def _deliver(self, msg: Msg) -> None:
        queue = self._queues.get(msg.subject)
        if queue is not None:  # else: a frame for a request that has already ended
            queue.put_nowait(msg)

    def open(self) -> tuple[str, asyncio.Queue[Frame]]:
        self._next += 1
        inbox, queue = f"{self.prefix}.{self._next}", asyncio.Queue[Frame]()
        self._queues[inbox] = queue
        self._opened[inbox] = time.monotonic()
        return inbox, queue

    def taken(self, inbox: str, worker_id: str) -> None:
        """``worker_id`` has taken the request answered on ``inbox``."""
        if inbox in self._queues:
            self._workers[inbox] = worker_id

    def close(self, inbox: str) -> None:
        self._queues.pop(inbox, None)
        self._opened.pop(inbox, None)
        self._workers.pop(inbox, None)

    def worker_lost(self, worker_id: str, reason: str) -> int:
        """End every request ``worker_id`` had taken, and every one taken by no worker yet that was
        sent at least UNTAKEN_GRACE_S ago, with a ``worker_lost`` error; returns how many."""
        return self._end_on(worker_id, f"was lost ({reason})", UNTAKEN_GRACE_S)

    def worker_reconnected(self, worker_id: str) -> int:
        """End every request ``worker_id`` had taken, and every one taken by no worker yet (router_svc or
        that worker may have held it), with a ``worker_lost`` error: its NATS connection was made again,
        and a frame it sent or a request sent to it on the old one may be gone with a server. Returns how many."""
        return self._end_on(worker_id, "lost its connection to NATS (made again since)", 0.0)

    def _end_on(self, worker_id: str, what: str, untaken_grace_s: float) -> int:
        now = time.monotonic()
        ended = 0
        for inbox, queue in list(self._queues.items()):
            taker = self._workers.get(inbox)
            if taker == worker_id:
                message = f"worker {worker_id}, which was answering this request, {what}"
            elif taker is None and now - self._opened.get(inbox, now) >= untaken_grace_s:
                message = f"no worker took this request, and worker {worker_id} {what}"
            else:
                continue
            queue.put_nowait(WorkerLost(worker_id, message))
            ended += 1
        return ended

    def bus_lost(self, url: str) -> int:
        """End every request in flight with a ``bus_lost`` error: the connection to NATS at ``url`` dropped,
        and what the server held for them went with it. Returns how many."""
        message = f"the gateway lost its connection to NATS at {url} while this request was in flight"
        for queue in self._queues.values():
            queue.put_nowait(RemoteError(BUS_LOST, message, 503, BUS_RETRY_AFTER_S))
        return len(self._queues)


class ReplyStream:
    def __init__(self, nc: Client, inboxes: Inboxes, settings: GatewaySettings) -> None:
        self.nc, self.inboxes, self.settings = nc, inboxes, settings
        self.inbox, self.queue = inboxes.open()
        # who is expected to speak next (for error messages): before the first chunk, router_svc or
        # the worker it forwarded the request to (the first chunk says which)
        self.source = f"{subjects.ROUTE} or the model it routed the request to"
        self.frames = 0  # chunks received (the accepted frame is not one)
        self.accepted: Accepted | None = None  # the worker that took the request, once it says so
        self.finished = False  # the last frame has come
        self._deadline = time.monotonic() + settings.request_timeout
        self.deadline = time.time() + settings.request_timeout  # the same, as unix time: it travels with the request

    async def open(self, request: RouteRequest) -> None:
        """Send ``request`` with the current trace context; the frames come back on our inbox. A 503
        ``not_ready`` instead while the connection is down (what is sent then may meet a server that is gone)."""
        if not self.nc.is_connected:
            raise not_connected(self.settings.nats_url)
        await self.nc.publish(subjects.ROUTE, rpc.encode(request), reply=self.inbox, headers=tracing.inject())

    async def next(self) -> InboxFrame | None:
        """The next chunk, or None at the end of the answer."""
        while not self.finished:
            msg = await self._receive()
            if rpc.is_accepted(msg):
                self._take(msg)
                continue
            return self._chunk(msg)
        return None

    async def _receive(self) -> Msg:
        speed = self.accepted.decode_tokens_per_s if self.accepted is not None else None
        wait, which = next_frame_timeout(
            self.settings, accepted=self.accepted is not None, chunks=self.frames, tokens_per_s=speed
        )
        remaining = self._deadline - time.monotonic()
        try:
            async with asyncio.timeout(max(0.0, min(wait, remaining))):
                frame = await self.queue.get()
        except TimeoutError:
            if remaining <= wait:
                raise DeadlineExceeded(
                    f"the request did not complete within {self.settings.request_timeout:g}s"
                ) from None
            raise DeadlineExceeded(f"no {which} from {self.source} within {wait:.3g}s") from None
        if isinstance(frame, RemoteError):
            raise frame
        return frame

    def _take(self, msg: Msg) -> None:
        try:
            self.accepted = _accepted.decode(msg.data)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise RemoteError("bad_reply", f"an invalid accepted frame from {self.source}: {exc}", 502) from exc
        self.source = f"worker {self.accepted.worker_id} ({subjects.infer(self.accepted.model_id)})"
        self.inboxes.taken(self.inbox, self.accepted.worker_id)

    def _chunk(self, msg: Msg) -> InboxFrame | None:
        self.frames += 1
        payload, self.finished = rpc.frame_payload(msg, self.source)
        if payload is None:
            return None
        try:
            frame: InboxFrame = _frames.decode(payload)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise RemoteError("bad_reply", f"an invalid frame from {self.source}: {exc}", 502) from exc
        if frame.route is not None and self.accepted is None:
            self.source = subjects.infer(frame.route.target)
        return frame

    def expect(self, model: str) -> None:
        """A direct call: router_svc forwards it to ``model`` without a decision."""
        self.source = f"{subjects.ROUTE} -> {subjects.infer(model)}"

    def close(self) -> None:
        self.inboxes.close(self.inbox)
