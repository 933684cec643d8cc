"""The JetStream stream that carries every event, and publishing to it."""

from __future__ import annotations

from collections.abc import Mapping

from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import NotFoundError

from nrt.bus import subjects
from nrt.bus.contract import Service, first_publisher
from nrt.bus.tracing import inject
from nrt.events import VERSION_HEADER, Event, EventDecodeError, encode, schema_version

DUPLICATE_WINDOW_S = 120.0  # a re-published event id within this window is dropped by JetStream


async def ensure_events_stream(js: JetStreamContext, name: str = subjects.EVENTS_STREAM) -> None:
    """Create the events stream if it does not exist (file storage, deduplicated by event id)."""
    try:
        await js.stream_info(name)
        return
    except NotFoundError:
        pass
    await js.add_stream(
        StreamConfig(
            name=name,
            subjects=[subjects.EVENTS_ALL],
            storage=StorageType.FILE,
            retention=RetentionPolicy.LIMITS,
            discard=DiscardPolicy.OLD,
            duplicate_window=DUPLICATE_WINDOW_S,
        )
    )


def event_subject(type_name: str, service: Service | None) -> str:
    """The subject ``service`` publishes an event of ``type_name`` on; with no service, the subject of the
    type's first publisher in the contract (tools and tests on an open bus)."""
    return subjects.event(service or first_publisher(type_name), type_name)


def event_headers(event: Event) -> dict[str, str]:
    """A message's headers for ``event``: its id as the message id (JetStream drops a re-sent id), its
    schema version (readers upcast an older one), and the caller's trace context."""
    return inject({"Nats-Msg-Id": event.event_id, VERSION_HEADER: str(schema_version(event.type))})


def message_version(headers: Mapping[str, str] | None) -> int:
    """The schema version of a message's body: its version header; a message without one was published
    before events carried it and is read as version 1 (upcasters accept later bodies too)."""
    value = (headers or {}).get(VERSION_HEADER)
    if value is None:
        return 1
    try:
        return int(value)
    except ValueError:
        raise EventDecodeError(f"the {VERSION_HEADER} header {value!r} is not a version number") from None


class EventPublisher:
    """Publishes events to JetStream as ``service``; the event id is the message id, so a retry is never stored
    twice. Without a service each event goes out as its type's first publisher (``event_subject``)."""

    def __init__(self, nc: Client, timeout: float = 5.0, *, service: Service | None = None) -> None:
        self.js = nc.jetstream(timeout=timeout)
        self.service = service

    async def publish(self, event: Event) -> int:
        """Publish ``event``; returns its JetStream sequence once the stream has stored it."""
        ack = await self.js.publish(
            event_subject(event.type, self.service), encode(event), headers=event_headers(event)
        )
        return ack.seq
