"""Follow the event stream and fold it into a local ClusterState (the gateway's and router's view).

An ordered, ephemeral JetStream consumer — a FastStream subscriber on the service's
broker, typed by the events' tagged union and decoded by the events' own codec —
delivers the events from the start of the stream, in order; each is folded with the
same pure ``evolve`` that cluster_state and ``nrt replay`` use. The manifest in force is parsed from the last ``ManifestApplied``.
A follower may take only some event types (the gateway and router_svc follow the
control plane): the server filters, so the others never reach the process.

The stream keeps only the recent part of the log (its retention limits). A follower that
finds the stream's first message past sequence 1 cannot fold it from the beginning: it asks
cluster_state for its fold placed on the stream (``nrt.core.state.stream``), starts from that
state and follows the next sequence on, skipping the events the state already holds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

from faststream.message import StreamMessage
from faststream.nats import JStream, NatsBroker
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy

from nrt.adapters.bus import subjects
from nrt.adapters.bus.broker import call
from nrt.adapters.bus.contract import EVENT_PUBLISHERS, event_subjects
from nrt.adapters.bus.errors import RemoteError
from nrt.adapters.bus.jetstream import message_version
from nrt.core.events import AnyEvent, Event, decode
from nrt.core.manifest import Manifest, ManifestError, parse_manifest
from nrt.core.state import ClusterState, evolve
from nrt.core.state.stream import StreamSnapshot, StreamSnapshotQuery, followable, narrow

log = logging.getLogger("nrt.adapters.bus.follow")

Listener = Callable[[AnyEvent, ClusterState], None]
SNAPSHOT_TIMEOUT_S = 10.0  # one ask of cluster_state for its snapshot


async def decode_event(message: StreamMessage[Any], original: Any) -> AnyEvent:
    """An event's bytes through the events' codec, upcast from the version its header names
    (EventDecodeError names what is wrong)."""
    return decode(message.body, message_version(message.headers))


class EventFollower:
    def __init__(self, broker: NatsBroker, *, snapshot_timeout: float = SNAPSHOT_TIMEOUT_S) -> None:
        self.broker = broker
        self.state = ClusterState()
        self.sequence = 0  # the stream sequence of the last folded (or skipped) event
        self.snapshot: StreamSnapshot | None = None  # what it started from, when the stream lacked its start
        self.snapshot_timeout = snapshot_timeout
        self._ahead: set[str] = set()  # ids the snapshot holds that the stream carries after its sequence
        self._manifest: Manifest | None = None
        self._manifest_digest: str | None = None
        self._changed = asyncio.Condition()
        self._listeners: list[Listener] = []

    async def start(self, *, types: Sequence[type[Event]] = (), latest_only: bool = False) -> None:
        """Start following every event, or only those of ``types``; ``latest_only`` starts from
        the last event of each type (and publisher) instead of the beginning of the stream.

        The consumer takes only the subjects the contract allows for each type: an event its
        publisher may not send (a forgery on its own prefix) never reaches the fold.

        When the stream no longer holds its first message, the follower starts from cluster_state's
        snapshot (waiting for cluster_state to answer) and follows the stream after it; a follower of
        only some types must take every type or control-plane types only (``nrt.core.state.stream.narrow``)."""
        names = [t.__name__ for t in types] if types else list(EVENT_PUBLISHERS)
        filters = [subject for name in names for subject in event_subjects(name)]
        if not filters:
            raise ValueError(f"no service publishes any of {', '.join(names)}: nothing to follow")
        followable(types)
        config = ConsumerConfig(filter_subjects=filters)
        deliver = DeliverPolicy.LAST_PER_SUBJECT if latest_only else DeliverPolicy.ALL
        js = self.broker.connection.jetstream()
        stream = await js.stream_info(subjects.EVENTS_STREAM)
        if stream.state.first_seq > 1:  # the stream's retention dropped its start: take it up from cluster_state
            snapshot = await self._snapshot(js)
            self.snapshot, self.sequence, self._ahead = snapshot, snapshot.sequence, set(snapshot.ahead)
            self.state = narrow(snapshot.state, types)
            deliver = config.deliver_policy = DeliverPolicy.BY_START_SEQUENCE
            config.opt_start_seq = snapshot.sequence + 1
            log.info(
                "the stream starts at sequence %d: following it from %d on cluster_state's snapshot "
                "(log position %d, %d decisions on their way)",
                stream.state.first_seq,
                snapshot.sequence + 1,
                snapshot.position,
                len(snapshot.ahead),
            )
        subscriber = self.broker.subscriber(
            subjects.EVENTS_ALL,
            stream=JStream(subjects.EVENTS_STREAM, declare=False),
            ordered_consumer=True,
            deliver_policy=deliver,
            config=config,
            decoder=decode_event,
            no_reply=True,  # the reply subject of a JetStream message is its ack subject, not a caller
            title="follow the event stream",
        )
        subscriber(self.fold)
        await subscriber.start()
        if self.snapshot is not None:
            async with self._changed:
                self._changed.notify_all()

    async def _snapshot(self, js: JetStreamContext) -> StreamSnapshot:
        """cluster_state's fold placed on the stream, once it answers with one this stream continues (its
        sequence from the message before the stream's first to the stream's last); asked again until then."""
        delay = 0.1
        while True:
            try:
                snapshot = await call(
                    self.broker, subjects.STATE_SNAPSHOT, StreamSnapshotQuery(), StreamSnapshot, self.snapshot_timeout
                )
            except RemoteError as exc:
                log.warning(
                    "the stream lacks its start and cluster_state gives no snapshot yet (%s); asking again", exc
                )
            else:
                stream = (await js.stream_info(subjects.EVENTS_STREAM)).state
                if stream.first_seq - 1 <= snapshot.sequence <= stream.last_seq:
                    return snapshot
                log.warning(
                    "cluster_state's snapshot covers the stream up to sequence %d, the stream holds %d..%d: %s; "
                    "asking again",
                    snapshot.sequence,
                    stream.first_seq,
                    stream.last_seq,
                    "what lies between is gone from it"
                    if snapshot.sequence < stream.first_seq
                    else "cluster_state has not recorded this stream yet",
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    def listen(self, listener: Listener) -> None:
        """Call ``listener(event, state_after)`` for every event folded from now on."""
        self._listeners.append(listener)

    async def fold(self, event: AnyEvent) -> None:
        """Fold the next event of the stream (an undecodable one is logged and skipped by the broker); one the
        snapshot it started from already holds is skipped."""
        self.sequence = self.broker.context.get("message").raw_message.metadata.sequence.stream
        if self._ahead and event.event_id in self._ahead:
            self._ahead.discard(event.event_id)
        else:
            self.state = evolve(self.state, event)
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
