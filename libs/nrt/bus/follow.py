"""Follow the event stream and fold it into a local ClusterState (the gateway's and router's view).

An ordered, ephemeral JetStream consumer delivers every event from the start of the
stream, in order; each is folded with the same pure ``evolve`` that cluster_state and
``nrt replay`` use. The manifest in force is parsed from the last ``ManifestApplied``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy
from nats.js.client import JetStreamContext

from nrt.bus import subjects
from nrt.events import AnyEvent, EventDecodeError, decode
from nrt.manifest import Manifest, ManifestError, parse_manifest
from nrt.state import ClusterState, evolve

log = logging.getLogger("nrt.bus.follow")

Listener = Callable[[AnyEvent, ClusterState], None]


class EventFollower:
    def __init__(self, nc: Client) -> None:
        self.nc = nc
        self.state = ClusterState()
        self.sequence = 0  # the stream sequence of the last folded event
        self._manifest: Manifest | None = None
        self._manifest_digest: str | None = None
        self._changed = asyncio.Condition()
        self._listeners: list[Listener] = []
        self._sub: object | None = None

    async def start(self, js: JetStreamContext | None = None, *, only: str | None = None) -> None:
        """Start following; ``only="ManifestApplied"`` follows one event type from its last event."""
        js = js or self.nc.jetstream()
        self._sub = await js.subscribe(
            subjects.event(only) if only else subjects.EVENTS_ALL,
            stream=subjects.EVENTS_STREAM,
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.LAST_PER_SUBJECT if only else DeliverPolicy.ALL,
            cb=self._on_message,
        )

    def listen(self, listener: Listener) -> None:
        """Call ``listener(event, state_after)`` for every event folded from now on."""
        self._listeners.append(listener)

    async def _on_message(self, msg: Msg) -> None:
        try:
            event = decode(msg.data)
        except EventDecodeError as exc:
            log.error("skipping an undecodable event at sequence %s: %s", msg.metadata.sequence.stream, exc)
            return
        self.state = evolve(self.state, event)
        self.sequence = msg.metadata.sequence.stream
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
