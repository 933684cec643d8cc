"""Follow the event stream and fold it into a local ClusterState (the gateway's and router's view).

An ordered, ephemeral JetStream consumer — a FastStream subscriber on the service's
broker, typed by the events' tagged union and decoded by the events' own codec —
delivers the events from the start of the stream, in order; each is folded with the
same pure ``evolve`` that cluster_state and ``nrt replay`` use. The manifest in force is parsed from the last ``ManifestApplied``.
A follower may take only some event types (the gateway and router_svc follow the
control plane): the server filters, so the others never reach the process.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

from faststream.message import StreamMessage
from faststream.nats import JStream, NatsBroker
from nats.js.api import ConsumerConfig, DeliverPolicy

from nrt.bus import subjects
from nrt.bus.contract import EVENT_PUBLISHERS, event_subjects
from nrt.bus.jetstream import message_version
from nrt.events import AnyEvent, Event, decode
from nrt.manifest import Manifest, ManifestError, parse_manifest
from nrt.state import ClusterState, evolve

log = logging.getLogger("nrt.bus.follow")

Listener = Callable[[AnyEvent, ClusterState], None]


async def decode_event(message: StreamMessage[Any], original: Any) -> AnyEvent:
    """An event's bytes through the events' codec, upcast from the version its header names
    (EventDecodeError names what is wrong)."""
    return decode(message.body, message_version(message.headers))


class EventFollower:
    def __init__(self, broker: NatsBroker) -> None:
        self.broker = broker
        self.state = ClusterState()
        self.sequence = 0  # the stream sequence of the last folded event
        self._manifest: Manifest | None = None
        self._manifest_digest: str | None = None
        self._changed = asyncio.Condition()
        self._listeners: list[Listener] = []

    async def start(self, *, types: Sequence[type[Event]] = (), latest_only: bool = False) -> None:
        """Start following every event, or only those of ``types``; ``latest_only`` starts from
        the last event of each type (and publisher) instead of the beginning of the stream.

        The consumer takes only the subjects the contract allows for each type: an event its
        publisher may not send (a forgery on its own prefix) never reaches the fold."""
        names = [t.__name__ for t in types] if types else list(EVENT_PUBLISHERS)
        filters = [subject for name in names for subject in event_subjects(name)]
        if not filters:
            raise ValueError(f"no service publishes any of {', '.join(names)}: nothing to follow")
        config = ConsumerConfig(filter_subjects=filters)
        subscriber = self.broker.subscriber(
            subjects.EVENTS_ALL,
            stream=JStream(subjects.EVENTS_STREAM, declare=False),
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.LAST_PER_SUBJECT if latest_only else DeliverPolicy.ALL,
            config=config,
            decoder=decode_event,
            no_reply=True,  # the reply subject of a JetStream message is its ack subject, not a caller
            title="follow the event stream",
        )
        subscriber(self.fold)
        await subscriber.start()

    def listen(self, listener: Listener) -> None:
        """Call ``listener(event, state_after)`` for every event folded from now on."""
        self._listeners.append(listener)

    async def fold(self, event: AnyEvent) -> None:
        """Fold the next event of the stream (an undecodable one is logged and skipped by the broker)."""
        self.state = evolve(self.state, event)
        self.sequence = self.broker.context.get("message").raw_message.metadata.sequence.stream
        for listener in self._listeners:
            listener(event, self.state)
        async with self._changed:
            self._changed.notify_all()

    @property
    def manifest(self) -> Manifest | None:
        """The manifest in force (parsed once per version), or None before the first one."""
        if self.state.manifest_text is None:
            return None
        if self.state.manifest_digest != self._manifest_digest:
            self._manifest_digest = self.state.manifest_digest
            try:
                self._manifest = parse_manifest(self.state.manifest_text, f"manifest v{self.state.manifest_version}")
            except ManifestError as exc:  # cluster_state validates before applying; keep serving the last good one
                log.error(
                    "manifest v%s in the event log does not parse; keeping the previous one:\n%s",
                    self.state.manifest_version,
                    exc,
                )
        return self._manifest

    async def wait_for(self, predicate: Callable[[ClusterState], bool], within: float) -> ClusterState:
        """Wait until the folded state satisfies ``predicate``; TimeoutError after ``within`` seconds."""
        async with asyncio.timeout(within), self._changed:
            await self._changed.wait_for(lambda: predicate(self.state))
        return self.state
