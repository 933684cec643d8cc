"""Publish events off the request path: ``emit`` never waits, events keep their order.

Services on the request path (the gateway, router_svc) record facts without waiting for
JetStream's acknowledgement: ``emit`` queues the event with the caller's trace context, a
single task sends the queue in order (so a request's RequestAdmitted is stored before its
RequestCompleted), and the acknowledgements are checked as they arrive. The event id is
the message id, so a re-sent event is stored once. ``flush`` and ``close`` wait for the
queue and the outstanding acknowledgements; an event that is not acknowledged within
``ack_timeout`` is logged and counted as lost, never silently dropped.

An event that must be sent again (the stream did not store it: no leader for a moment while a NATS cluster
elects one, or no acknowledgement in time) puts its stream (its request, its worker...) in a backlog: from
then on that stream's events go one at a time, in the order they were emitted, until the backlog is
empty. A request's RequestCompleted is never stored before its RequestAdmitted, whose fold would then
leave the request in flight for ever; the events of other streams go on meanwhile.

With an :class:`~nrt.adapters.bus.outbox.Outbox`, ``emit`` first appends the event to it (one write,
no wait), and the acknowledgement settles it: a process killed right after a request keeps
its events there, and the next process of the service to start sends them again.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import itertools
import logging
import time
from dataclasses import dataclass, field

from nats.aio.client import Client
from nats.js.api import PubAck

from nrt.adapters.bus.contract import Service
from nrt.adapters.bus.jetstream import event_headers, event_subject
from nrt.adapters.bus.outbox import Outbox
from nrt.core.events import Event, encode

log = logging.getLogger("nrt.adapters.bus.emitter")


class EventEmitter:
    def __init__(
        self,
        nc: Client,
        ack_timeout: float = 5.0,
        max_queued: int = 100_000,
        outbox: Outbox | None = None,
        max_retry_s: float = 5.0,
        *,
        service: Service | None = None,  # publish as this service (None: as each type's first publisher)
    ) -> None:
        self.js = nc.jetstream(timeout=ack_timeout)
        self.service = service
        self.outbox = outbox
        self.ack_timeout = ack_timeout
        self.max_retry_s = max_retry_s
        self.sent = 0  # acknowledged by the stream
        self.lost = 0  # not queued: the queue was full
        self.retried = 0  # sends that failed (not published, or not acknowledged in time) and were tried again
        self._queue: asyncio.Queue[_Item] = asyncio.Queue(max_queued)
        self._pending: dict[asyncio.Future[PubAck], tuple[_Item, float]] = {}
        self._outstanding = 0  # emitted, not yet acknowledged or lost
        self._backlogs: dict[str, _Backlog] = {}  # stream id -> its events since one had to be sent again
        self._order = itertools.count()  # emission order
        self._idle = asyncio.Event()
        self._idle.set()
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        self._tasks = [asyncio.create_task(self._send_loop()), asyncio.create_task(self._expire_loop())]
        if self.outbox is not None:
            adopted = 0
            for event in self.outbox.adopt():  # a crashed predecessor's events: sent again
                self.emit(event)
                adopted += 1
            if adopted:
                log.warning("sending again %d event(s) that a stopped process had not seen stored", adopted)

    def emit(self, event: Event) -> None:
        """Queue ``event`` for publishing, with the current trace context; never blocks (with an
        outbox, the event is written there first)."""
        headers = event_headers(event)
        data = encode(event)
        if self.outbox is not None:
            try:
                self.outbox.add(event.event_id, data)
            except OSError as exc:  # a full disk must not fail the request: publish it all the same
                log.error("could not keep %s %s in the outbox: %s", event.type, event.event_id, exc)
        item = _Item(event, data, headers, order=next(self._order))
        backlog = self._backlogs.get(item.stream)
        if backlog is not None:  # its stream sends one event at a time, in order: this one waits its turn
            backlog.add(item)
            self._outstanding += 1
            self._idle.clear()
            return
        try:
            self._queue.put_nowait(item)
            self._outstanding += 1
            self._idle.clear()
        except asyncio.QueueFull:
            self.lost += 1
            log.error("event queue full: dropped %s %s", event.type, event.event_id)

    def _again(self, item: _Item, why: str) -> None:
        """Send ``item`` again after its back-off; it stays outstanding (and in the outbox) until stored, and its
        stream's events go one at a time, in order, from now until all are stored."""
        self.retried += 1
        delay = min(self.max_retry_s, 0.5 * 2**item.attempt)
        level = logging.WARNING if item.attempt == 0 else logging.DEBUG
        log.log(
            level,
            "%s %s not stored yet (%s); sending it again in %.1fs",
            item.event.type,
            item.event.event_id,
            why,
            delay,
        )
        again = _Item(item.event, item.data, item.headers, item.attempt + 1, item.order)
        backlog = self._backlogs.setdefault(item.stream, _Backlog())
        backlog.add(again)
        if backlog.sending == again.event.event_id:
            backlog.sending, backlog.busy = None, False
        if not backlog.busy:  # none of the stream's events is on its way: the first goes after the back-off
            backlog.busy = True
            asyncio.get_running_loop().call_later(delay, self._turn, item.stream)

    def _turn(self, stream: str) -> None:
        """Send the first event of ``stream``'s backlog."""
        backlog = self._backlogs.get(stream)
        if backlog is None or not backlog.items:
            return
        first = backlog.items[0]
        backlog.sending = first.event.event_id
        self._requeue(first)

    def _requeue(self, item: _Item) -> None:
        try:
            self._queue.put_nowait(item)
        except asyncio.QueueFull:
            self.lost += 1
            log.error("event queue full: dropped %s %s", item.event.type, item.event.event_id)
            self._done(item)
            self._settle()

    def _done(self, item: _Item) -> None:
        """``item`` is stored (or lost): the next event of its stream's backlog goes, or the backlog ends."""
        backlog = self._backlogs.get(item.stream)
        if backlog is None:
            return
        backlog.remove(item)
        if backlog.sending == item.event.event_id:
            backlog.sending, backlog.busy = None, False
        if not backlog.items:
            del self._backlogs[item.stream]
        elif not backlog.busy:
            backlog.busy = True
            self._turn(item.stream)

    async def flush(self, within: float = 10.0) -> None:
        """Wait until every emitted event is acknowledged (or counted lost); TimeoutError after ``within``."""
        async with asyncio.timeout(within):
            await self._idle.wait()

    async def close(self, within: float = 5.0) -> None:
        """Flush what can be flushed within ``within`` seconds, then stop."""
        try:
            await self.flush(within)
        except TimeoutError:
            log.error("closing with %d event(s) unsent or unacknowledged", self._outstanding)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.outbox is not None:  # what is still unsettled stays for the next start
            self.outbox.close(remove=self.outbox.outstanding == 0)

    def _settle(self) -> None:
        self._outstanding -= 1
        if self._outstanding == 0:
            self._idle.set()

    async def _send_loop(self) -> None:
        while True:
            item = await self._queue.get()
            try:
                future = await self.js.publish_async(
                    event_subject(item.event.type, self.service),
                    item.data,
                    headers=item.headers,
                    wait_stall=self.ack_timeout,
                )
                self._pending[future] = (item, time.monotonic())
                future.add_done_callback(self._acknowledged)
            except Exception as exc:  # a full ack window or a closed connection: try again later
                self._again(item, repr(exc))

    def _acknowledged(self, future: asyncio.Future[PubAck]) -> None:
        item, _ = self._pending.pop(future, (None, 0.0))
        if item is None:
            return
        if future.cancelled() or future.exception() is not None:
            self._again(item, "no acknowledgement in time" if future.cancelled() else repr(future.exception()))
            return
        self.sent += 1
        if self.outbox is not None:
            self.outbox.settle(item.event.event_id)
        self._done(item)
        self._settle()

    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(min(1.0, self.ack_timeout / 2))
            cutoff = time.monotonic() - self.ack_timeout
            for future, (_, sent_at) in list(self._pending.items()):
                if sent_at < cutoff:
                    future.cancel()


@dataclass(frozen=True, slots=True)
class _Item:
    """An event on its way: its canonical JSON, its headers, and how many sends of it failed."""

    event: Event
    data: bytes
    headers: dict[str, str]
    attempt: int = 0
    order: int = 0  # when it was emitted: its place in its stream's backlog

    @property
    def stream(self) -> str:
        """The stream (request, worker, model...) whose events must be stored in the order they were emitted."""
        try:
            return self.event.stream_id
        except NotImplementedError:  # an event type of no stream: ordered by nothing but itself
            return self.event.event_id


@dataclass(slots=True)
class _Backlog:
    """A stream's events not stored yet since one of them had to be sent again, in the order emitted; one at a
    time is on its way (``sending``), the first, or waits for its back-off (``busy`` in both cases)."""

    items: list[_Item] = field(default_factory=list)
    sending: str | None = None
    busy: bool = False

    def add(self, item: _Item) -> None:
        self.remove(item)
        bisect.insort(self.items, item, key=lambda i: i.order)

    def remove(self, item: _Item) -> None:
        self.items = [i for i in self.items if i.event.event_id != item.event.event_id]
