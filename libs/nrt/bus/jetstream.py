"""The JetStream stream that carries every event, and publishing to it."""

from __future__ import annotations

from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import NotFoundError

from nrt.bus import subjects
from nrt.bus.tracing import inject
from nrt.events import Event, encode

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


class EventPublisher:
    """Publishes events to JetStream; the event id is the message id, so a retry is never stored twice."""

    def __init__(self, nc: Client, timeout: float = 5.0) -> None:
        self.js = nc.jetstream(timeout=timeout)

    async def publish(self, event: Event) -> int:
        """Publish ``event``; returns its JetStream sequence once the stream has stored it."""
        ack = await self.js.publish(
            subjects.event(event.type), encode(event), headers=inject({"Nats-Msg-Id": event.event_id})
        )
        return ack.seq
