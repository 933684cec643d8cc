"""The hot path on raw nats-py: routed requests, inference requests and their streamed replies.

``nrt.route`` and ``nrt.infer.<model>`` with their token streams stay off FastStream (the
control plane's transport, ``nrt.adapters.bus.broker``): ``bench.gateway`` measures FastStream at
several times raw nats-py's latency on exactly these subjects. Both speak the same frames.

Every reply carries an ``Nrt-Frame`` header: ``data`` (a payload), ``last`` (a payload
that completes the stream), ``end`` (a stream is complete, no payload), ``error`` (an
ErrorFrame) or ``accepted`` (a worker has taken the request: an ``Accepted``, which a reader
that only wants the answer skips). A sender that knows which chunk is its last (a one-chunk answer, a
generation's finishing token) marks it ``last``: one message fewer per answer. A handler
that fails, or a request that does not decode, is answered with an error frame: the
caller never waits out a timeout for it.
Every call has a deadline; a missed one raises DeadlineExceeded naming the subject.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from nrt.adapters.bus import tracing
from nrt.adapters.bus.broker import ACCEPTED, DATA, END, ERROR, FRAME, LAST, as_remote, decode_reply, raise_if_error
from nrt.adapters.bus.errors import BadRequest, DeadlineExceeded, Overloaded, RemoteError, Unavailable

log = logging.getLogger("nrt.adapters.bus")
tracer = trace.get_tracer("nrt.adapters.bus")

Req = TypeVar("Req", bound=msgspec.Struct)
Resp = TypeVar("Resp", bound=msgspec.Struct)

_encoder = msgspec.json.Encoder()


def encode(message: msgspec.Struct) -> bytes:
    return _encoder.encode(message)


def _frame_kind(msg: Msg) -> str:
    return (msg.headers or {}).get(FRAME, DATA)


def _raise_if_error(msg: Msg) -> None:
    raise_if_error(msg.headers, msg.data)


def _decode(msg: Msg, kind: type[Resp], subject: str) -> Resp:
    return decode_reply(msg.data, kind, subject)


# -- calling ---------------------------------------------------------------------------


async def request(nc: Client, subject: str, payload: msgspec.Struct, reply_type: type[Resp], timeout: float) -> Resp:  # noqa: ASYNC109
    """Send ``payload`` to ``subject`` and decode its one reply; raise RemoteError on any failure."""
    with tracer.start_as_current_span(f"nats request {subject}", kind=SpanKind.CLIENT) as span:
        span.set_attribute("messaging.destination.name", subject)
        try:
            msg = await nc.request(subject, encode(payload), timeout=timeout, headers=tracing.inject())
        except NoRespondersError:
            raise Unavailable(f"nothing is serving {subject}", code="no_responders") from None
        except NatsTimeout:
            raise DeadlineExceeded(f"no reply from {subject} within {timeout:g}s") from None
        _raise_if_error(msg)
        return _decode(msg, reply_type, subject)


async def stream(
    nc: Client,
    subject: str,
    payload: msgspec.Struct,
    chunk_type: type[Resp],
    first_timeout: float,
    idle_timeout: float,
) -> AsyncIterator[Resp]:
    """Send ``payload`` with a fresh inbox as reply subject and yield the chunks streamed back.

    Ends at the ``end`` frame; an ``error`` frame raises RemoteError; no frame within
    ``first_timeout`` (first chunk) or ``idle_timeout`` (between chunks) raises DeadlineExceeded.
    """
    inbox = nc.new_inbox()
    queue: asyncio.Queue[Msg] = asyncio.Queue()
    sub = await nc.subscribe(inbox, cb=queue.put)
    try:
        with tracer.start_as_current_span(f"nats stream {subject}", kind=SpanKind.CLIENT) as span:
            span.set_attribute("messaging.destination.name", subject)
            await nc.publish(subject, encode(payload), reply=inbox, headers=tracing.inject())
            async for chunk in _read_stream(queue, chunk_type, subject, first_timeout, idle_timeout):
                yield chunk
    finally:
        await sub.unsubscribe()


async def _read_stream(
    queue: asyncio.Queue[Msg], chunk_type: type[Resp], subject: str, first_timeout: float, idle_timeout: float
) -> AsyncIterator[Resp]:
    timeout = first_timeout
    while True:
        try:
            msg = await asyncio.wait_for(queue.get(), timeout)
        except TimeoutError:
            which = "first reply" if timeout == first_timeout else "next chunk"
            raise DeadlineExceeded(f"no {which} from {subject} within {timeout:g}s") from None
        if is_accepted(msg):
            continue
        payload, last = frame_payload(msg, subject)
        if payload is not None:
            yield _decode(msg, chunk_type, subject)
        if last:
            return
        timeout = idle_timeout


def is_accepted(msg: Msg) -> bool:
    """Whether ``msg`` is an ``accepted`` frame (its payload is an ``Accepted``)."""
    return _frame_kind(msg) == ACCEPTED


def frame_payload(msg: Msg, subject: str) -> tuple[bytes | None, bool]:
    """(the payload of one streamed frame or None for ``end``, whether the stream is complete);
    raises RemoteError for an ``error`` frame or a no-responders status. For callers that read
    an inbox themselves (e.g. frames of a tagged union, decoded with their own decoder)."""
    kind = _frame_kind(msg)
    if kind == END:
        return None, True
    _raise_if_error(msg)
    if msg.headers and msg.headers.get("Status") == "503":
        raise Unavailable(f"nothing is serving {subject}", code="no_responders")
    return msg.data, kind == LAST


class StreamInbox:
    """A reply subject to which chunks may be streamed, possibly by another service."""

    def __init__(self, nc: Client, inbox: str) -> None:
        self.nc, self.inbox = nc, inbox
        self.ended = False  # a ``last``, ``end`` or ``error`` frame has been sent

    async def send(self, chunk: msgspec.Struct, *, last: bool = False) -> None:
        """Send one chunk; ``last=True`` completes the stream with it."""
        self.ended = self.ended or last
        await self.nc.publish(self.inbox, encode(chunk), headers={FRAME: LAST if last else DATA})

    async def accept(self, accepted: msgspec.Struct) -> None:
        """Tell the caller who took its request (before any chunk)."""
        await self.nc.publish(self.inbox, encode(accepted), headers={FRAME: ACCEPTED})

    async def end(self) -> None:
        self.ended = True
        await self.nc.publish(self.inbox, b"", headers={FRAME: END})

    async def fail(self, error: RemoteError) -> None:
        self.ended = True
        await self.nc.publish(self.inbox, encode(error.frame()), headers={FRAME: ERROR})


async def forward(nc: Client, subject: str, payload: msgspec.Struct, reply_to: str) -> None:
    """Publish ``payload`` to ``subject`` so that its replies go to ``reply_to`` (someone else's inbox)."""
    await nc.publish(subject, encode(payload), reply=reply_to, headers=tracing.inject())


# -- serving ---------------------------------------------------------------------------


def _decode_request(msg: Msg, kind: type[Req]) -> Req:
    try:
        return msgspec.json.decode(msg.data, type=kind)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise BadRequest(f"invalid {kind.__name__}: {exc}") from exc


async def serve_stream(
    nc: Client,
    subject: str,
    request_type: type[Req],
    handler: Callable[[Req, StreamInbox], Awaitable[None]],
    queue: str = "",
    limit: int | None = None,
    running: set[asyncio.Task[None]] | None = None,
) -> Subscription:
    """Run ``handler`` for each request, streaming to its reply subject; end the stream unless the
    handler sent its last chunk as such, or fail it for the handler.

    ``limit`` bounds the requests this subscription runs at once (each is one task, queued or
    running): one more is answered at once with an ``overloaded`` error frame, and no task.
    Subscriptions given the same ``running`` set share the bound (one model's queue-group and
    worker subjects)."""

    async def run(msg: Msg) -> None:
        inbox = StreamInbox(nc, msg.reply)
        with tracer.start_as_current_span(
            f"nats serve {subject}", context=tracing.extract(msg.headers), kind=SpanKind.SERVER
        ) as span:
            try:
                await handler(_decode_request(msg, request_type), inbox)
                if not inbox.ended:
                    await inbox.end()
            except Exception as exc:
                error = as_remote(exc, f"handler for {subject}")
                span.set_status(Status(StatusCode.ERROR, error.message))
                await inbox.fail(error)

    tasks: set[asyncio.Task[None]] = running if running is not None else set()

    async def on_message(msg: Msg) -> None:
        if not msg.reply:
            log.warning("dropping a request on %s without a reply subject", subject)
            return
        if limit is not None and len(tasks) >= limit:
            await StreamInbox(nc, msg.reply).fail(
                Overloaded(f"{subject} already has {len(tasks)} requests queued or running (the limit is {limit})")
            )
            return
        task = asyncio.create_task(run(msg))  # streams run concurrently
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    return await nc.subscribe(subject, queue=queue, cb=on_message)
