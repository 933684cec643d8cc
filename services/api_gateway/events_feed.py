"""``GET /v1/events/stream``: the event log, live, as server-sent events (the dashboard's feed).

Each request gets its own ordered, ephemeral JetStream consumer on the events stream (what the
gateway's NATS permissions allow: ``nrt.adapters.bus.auth``), starting ``last`` messages back from the
end of the stream, filtered by the server to the ``types`` asked for (every type by default).
Each event is one SSE frame: ``id`` the stream sequence, ``event`` the type, ``data`` the
event in its canonical JSON (``nrt.core.events.codec``). A comment line every ``KEEPALIVE_S``
seconds keeps proxies from closing a quiet stream. The stream ends when the client goes away,
or when the gateway is stopping (``ClusterLink.closing``), so an open dashboard does not hold it up.

The API key events (``ApiKeyCreated``, ``ApiKeyRevoked``: key hashes) are for admin keys only,
as the keys are in ``/v1/cluster``: an infer key's feed leaves them out, and asking for them is a 403.
So are the request texts a manifest with ``audit: {record_prompts: true}`` records: an infer key's
feed shows ``RequestAdmitted`` without its ``prompt`` (other callers' texts are not its to read).

It needs an API key like every ``/v1`` route; a browser sends it with ``fetch`` (streaming the
body), since ``EventSource`` cannot send headers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import msgspec
from litestar import Request, get
from litestar.di import NamedDependency
from litestar.params import FromQuery
from litestar.response import Stream
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, DeliverPolicy

from api_gateway.auth import caller, infer_key
from api_gateway.cluster_link import ClusterLink
from api_gateway.errors import ApiError
from api_gateway.openapi_docs import KEYED, errors
from nrt.adapters.bus import subjects
from nrt.adapters.bus.contract import EVENT_PUBLISHERS, event_subjects
from nrt.adapters.bus.jetstream import message_version
from nrt.core.events import AnyEvent, EventDecodeError, RequestAdmitted, decode, encode

log = logging.getLogger("api_gateway")

ADMIN_ONLY = frozenset({"ApiKeyCreated", "ApiKeyRevoked"})  # key hashes and names
MAX_LAST = 1000
DEFAULT_LAST = 100
KEEPALIVE_S = 15.0


@dataclass(frozen=True, slots=True)
class FeedQuery:
    types: tuple[str, ...]  # the event types asked for (every published type when none was named)
    last: int  # how many stream messages back to start from
    admin: bool = False  # an admin key asked: key events and request texts are shown

    @property
    def filters(self) -> list[str]:
        return [subject for name in self.types for subject in event_subjects(name)]


def feed_query(types: str | None, last: int, *, admin: bool) -> FeedQuery:
    """The feed asked for by ``?types=A,B&last=N``: ApiError 400 naming an unknown type or a bad
    count, 403 for a key event asked for without an admin key."""
    known = sorted(name for name in EVENT_PUBLISHERS if admin or name not in ADMIN_ONLY)
    names = tuple(dict.fromkeys(t.strip() for t in (types or "").split(",") if t.strip()))
    unknown = [name for name in names if name not in EVENT_PUBLISHERS]
    if unknown:
        raise ApiError(
            400,
            f"unknown event type(s) {', '.join(unknown)}; known: {', '.join(known)}",
            code="invalid_event_type",
            param="types",
        )
    refused = [name for name in names if name in ADMIN_ONLY and not admin]
    if refused:
        raise ApiError(403, f"{', '.join(refused)} events need an admin key", code="insufficient_scope", param="types")
    if not 0 <= last <= MAX_LAST:
        raise ApiError(400, f"last must be between 0 and {MAX_LAST}, not {last}", code="invalid_value", param="last")
    return FeedQuery(types=names or tuple(known), last=last, admin=admin)


def shown(event: AnyEvent, data: bytes, *, admin: bool) -> bytes:
    """The event's JSON as the feed shows it: a recorded request text (and its constraint's) only to an admin key."""
    if admin or not isinstance(event, RequestAdmitted) or (event.prompt is None and event.constraint is None):
        return data
    return encode(msgspec.structs.replace(event, prompt=None, constraint=None))


def sse_frame(sequence: int, type_name: str, data: bytes) -> bytes:
    """One server-sent event; ``data`` is single-line JSON (the canonical codec writes no newlines)."""
    return b"id: %d\nevent: %s\ndata: %s\n\n" % (sequence, type_name.encode(), data)


async def start_sequence(nc: Client, last: int) -> int:
    """The stream sequence ``last`` messages back from the end (the next one when ``last`` is 0)."""
    info = await nc.jetstream().stream_info(subjects.EVENTS_STREAM)
    return max(1, info.state.last_seq - last + 1)


async def event_frames(nc: Client, query: FeedQuery, closing: asyncio.Event) -> AsyncIterator[bytes]:
    """The SSE frames of the events ``query`` asks for, from its start, then live, until cancelled
    or ``closing`` is set."""
    config = ConsumerConfig(
        filter_subjects=query.filters,
        deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
        opt_start_seq=await start_sequence(nc, query.last),
    )
    sub = await nc.jetstream().subscribe(
        subjects.EVENTS_ALL, stream=subjects.EVENTS_STREAM, ordered_consumer=True, config=config
    )
    closed = asyncio.ensure_future(closing.wait())
    receiving: asyncio.Future[Msg] | None = None
    try:
        yield b": nrt events\n\n"  # the headers and a first byte now: the client knows it is connected
        while True:
            receiving = asyncio.ensure_future(sub.next_msg(timeout=KEEPALIVE_S))
            await asyncio.wait({receiving, closed}, return_when=asyncio.FIRST_COMPLETED)
            if closed.done():
                return
            try:
                msg = receiving.result()
            except TimeoutError:
                yield b": keepalive\n\n"
                continue
            try:
                version = message_version(msg.headers)
                event = decode(msg.data, version)
            except EventDecodeError as exc:
                log.warning("events feed: skipping an undecodable message on %s: %s", msg.subject, exc)
                continue
            data = msg.data if version == event.VERSION else encode(event)  # an older version goes out upcast
            yield sse_frame(msg.metadata.sequence.stream, event.type, shown(event, data, admin=query.admin))
    finally:
        closed.cancel()
        if receiving is not None:
            receiving.cancel()
        with contextlib.suppress(Exception):
            await asyncio.shield(sub.unsubscribe())


@get(
    "/v1/events/stream",
    guards=[infer_key],
    summary="The event log, live, as server-sent events (newest last), filtered by type",
    description=(
        "Starts `last` stream messages back from the end (default 100, at most 1000), then follows the "
        "stream. `types` is a comma-separated list of event types (every type by default). Each frame "
        "is `id: <stream sequence>`, `event: <type>`, `data: <the event's canonical JSON>`."
    ),
    responses=errors(400, 503, *KEYED),
    media_type="text/event-stream",
)
async def event_stream(
    cluster_link: NamedDependency[ClusterLink],
    request: Request[Any, Any, Any],
    types: FromQuery[str | None] = None,
    last: FromQuery[int] = DEFAULT_LAST,
) -> Stream:
    query = feed_query(types, last, admin=caller(request).admin)
    nc = cluster_link.require().nc
    return Stream(
        event_frames(nc, query, cluster_link.closing),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
