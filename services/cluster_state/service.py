"""cluster_state: the event log's recorder and the policies' shell.

Start-up: migrate the database, wait as a standby until this instance leads the log
(``cluster_state.leadership``: a lease and a fencing epoch; one instance records and decides at
a time, and the database refuses the writes of a deposed one), fold the PostgreSQL log into the state, start the durable JetStream consumer and fold
its backlog; when the stream lacks the manifest in force (a new or recreated stream),
re-publish from the log the state the other services fold (``reseed``); then — on a
first start with an empty log — apply the bootstrap manifest as ``ManifestApplied``
version 1. A bootstrap manifest that differs from the one the log holds is applied once serving,
as a drained swap to the next version (``Swapper``), after the workers from before the start have
beaten or been declared lost; the same manifest again records nothing. Then serve:

- ``nrt.state.get``: the folded ``ClusterState`` (exactly what ``nrt replay`` computes);
- ``nrt.state.snapshot``: that state placed on the events stream, for a follower that starts
  where the stream's retention dropped its beginning (``nrt.core.state.stream``);
- ``nrt.manifest.apply``: the drained manifest swap (``ApplyManifest`` -> ``ApplyResult``);
- ``nrt.models.promote``: make a model resident within the budget (``PromoteModel``);
- ``nrt.keys.create`` / ``nrt.keys.revoke``: API keys as events (``cluster_state.key_registry``); the
  keys given at start (``NRT_API_KEY``, ``NRT_ADMIN_KEY``) are recorded before the manifest;
- heartbeats on ``nrt.workers.heartbeat`` and ``nrt.gateways.heartbeat``; a tick for liveness,
  placement and the requests whose gateway is gone (``nrt.core.policies.owners``), a sweep for the
  session LRU.

While leading it renews its lease; ticks, sweeps and the policies act only while the lease runs. A
deposed instance (a renewal found another epoch, or the database refused a write) stops and exits with
``Deposed``; a clean stop releases the lease, so that a standby takes over at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from typing import Any

from faststream.nats import NatsBroker
from faststream.nats.subscriber.usecases import LogicSubscriber
from prometheus_client import CollectorRegistry

from cluster_state import snapshots
from cluster_state.controller import Controller, parse_in_force, utc_now
from cluster_state.key_registry import bootstrap_keys, create_key, revoke_key
from cluster_state.leadership import Deposed, Leadership
from cluster_state.outbox_relay import OutboxRelay
from cluster_state.promotion import promote
from cluster_state.recorder import Recorder
from cluster_state.reseed import state_in_force, stream_holds_manifest
from cluster_state.swap import Swapper
from cluster_state.whatif import dry_run
from nrt.adapters.bus import broker as bus
from nrt.adapters.bus import subjects
from nrt.adapters.bus.errors import RemoteError
from nrt.adapters.bus.hearing import Hearing
from nrt.adapters.bus.jetstream import EventPublisher, StreamLimits
from nrt.adapters.metrics import ClusterCollector, StateMetrics
from nrt.adapters.store import EventStore, upgrade
from nrt.core.eventlog import LeaseTerms, RecordedEvent
from nrt.core.events import DrainCompleted, ManifestApplied
from nrt.core.manifest import ManifestError
from nrt.core.policies import ControlState, Tuning
from nrt.core.policies.liveness import unheard
from nrt.core.protocol import (
    ApplyManifest,
    ApplyResult,
    CreateKey,
    PromoteModel,
    PromoteResult,
    RevokeKey,
    StateQuery,
    WhatIf,
)
from nrt.core.state import ApiKey, ClusterState
from nrt.core.state.stream import StreamSnapshot, StreamSnapshotQuery
from nrt.core.vocabulary import KeyScope
from nrt.core.whatif import WhatIfReport

log = logging.getLogger("nrt.cluster_state")

BOOTSTRAP_NAMESPACE = uuid.UUID("5f0c3b7e-3c1a-4d59-9d0e-6e7274000001")
OUTBOX_SCAN = 1_000_000  # the decisions left unpublished at start: the outbox is empty in a steady state
HEARING_TIMEOUT_S = 1.0  # a tick's ping to the NATS server: no answer within this, and nothing is decided


class ConfigurationError(Exception):
    """cluster_state cannot start as configured; the message says what to set."""


class ClusterStateService:
    def __init__(
        self,
        broker: NatsBroker,
        database_url: str,
        *,
        manifest_text: str | None = None,
        manifest_file: str = "the bootstrap manifest",
        tuning: Tuning | None = None,
        tick_s: float = 0.25,
        keys: dict[KeyScope, str] | None = None,
        registry: CollectorRegistry | None = None,
        snapshot_every_events: int = 10_000,
        snapshot_every_s: float = 60.0,
        stream_limits: StreamLimits | None = None,  # the events stream's retention (None: the defaults)
        lease: LeaseTerms | None = None,  # the leader's lease (None: the defaults)
        holder: str | None = None,  # this instance's name in the leadership record (None: host-pid)
        stream_replicas: int | None = None,  # the events stream's copies (None: by the NATS cluster's size)
    ) -> None:
        self.broker = broker
        self.metrics = StateMetrics(registry)  # registry: its service's (default: its own)
        nc = broker.connection
        self.database_url = database_url
        self.manifest_text = manifest_text
        self.manifest_file = manifest_file
        self.tick_s = tick_s
        self._hearing_probe: Hearing | None = None  # asks whether our NATS server answers (see _hearing)
        self._heard = True  # what it said last
        self.keys = keys or {}  # the keys given at start, by scope (never logged)
        self.stopping = asyncio.Event()
        self.store = EventStore.connect(database_url)
        self.leadership = Leadership(
            self.store, lease or LeaseTerms(), holder or f"{socket.gethostname()}-{os.getpid()}"
        )
        self.publisher = EventPublisher(nc, service="cluster_state")
        self.controller = Controller(
            broker, self.publisher, ControlState(started_at=utc_now(), tuning=tuning or Tuning()), decisions=self.store
        )
        self.relay = OutboxRelay(nc, self.store)
        self.controller.on_decided = self.relay.notify
        self.controller.leading = self.leadership.leads
        self.controller.on_decisions_recorded = self._on_recorded
        self.swapper = Swapper(self.controller)
        self.recorder = Recorder(
            nc,
            self.store,
            self._on_recorded,
            metrics=self.metrics,
            append=self.controller.record,
            limits=stream_limits or StreamLimits(),
            may_fetch=self.leadership.leads,
            replicas=stream_replicas,
        )
        self.metrics.registry.register(
            ClusterCollector(lambda: self.controller.cluster, lambda: self.controller.manifest, sessions=True)
        )
        self.snapshot_every = (snapshot_every_events, snapshot_every_s)
        self._subs: list[LogicSubscriber[Any]] = []
        self._tasks: list[asyncio.Task[None]] = []

    # -- life cycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        await asyncio.to_thread(upgrade, self.database_url)
        await self._lead()
        self._tasks.append(asyncio.create_task(self.leadership.keep(self.stopping), name="cluster_state lease"))
        await self._rebuild()
        await self.recorder.start()
        # where the fold stands on the stream: the recorder's start, and the decisions not published yet
        unpublished = await self.store.unpublished(OUTBOX_SCAN)
        self.controller.resume_stream(self.recorder.sequence, [entry.event_id for entry in unpublished])
        self._tasks.append(asyncio.create_task(self.recorder.run(self.stopping), name="cluster_state recorder"))
        # decisions a stopped predecessor recorded but did not publish go out first
        self._tasks.append(asyncio.create_task(self.relay.run(self.stopping), name="cluster_state outbox relay"))
        await self.recorder.caught_up.wait()
        await self._reseed()
        await bootstrap_keys(self.controller, self.keys)
        changed = await self._bootstrap()
        self._start_snapshots()
        self._subs += [
            await bus.serve(self.broker, subjects.STATE, self.serve_state, title="cluster_state: state"),
            await bus.serve(
                self.broker, subjects.STATE_SNAPSHOT, self.serve_snapshot, title="cluster_state: stream snapshot"
            ),
            await bus.serve(
                self.broker, subjects.MANIFEST_APPLY, self.apply, title="cluster_state: manifest swap", max_workers=4
            ),
            await bus.serve(
                self.broker, subjects.MANIFEST_WHATIF, self.what_if, title="cluster_state: what-if", max_workers=2
            ),
            await bus.serve(self.broker, subjects.KEYS_CREATE, self.create_key, title="cluster_state: create a key"),
            await bus.serve(self.broker, subjects.KEYS_REVOKE, self.revoke_key, title="cluster_state: revoke a key"),
            await bus.serve(
                self.broker, subjects.PROMOTE, self.promote, title="cluster_state: promote", max_workers=16
            ),
            await bus.serve(
                self.broker, subjects.WORKER_HEARTBEAT, self.controller.on_heartbeat, title="cluster_state: heartbeats"
            ),
            await bus.serve(
                self.broker,
                subjects.GATEWAY_HEARTBEAT,
                self.controller.on_gateway_heartbeat,
                title="cluster_state: gateway heartbeats",
            ),
        ]
        self.controller.listening()
        self.controller.acting = True
        self._tasks.append(asyncio.create_task(self._ticks(), name="cluster_state ticks"))
        self._tasks.append(asyncio.create_task(self._sweeps(), name="cluster_state sweeps"))
        if changed is not None:
            self._tasks.append(asyncio.create_task(self._apply_given(changed), name="cluster_state given manifest"))
        log.info(
            "cluster_state recording from stream sequence %d, log at %d",
            self.recorder.sequence,
            self.controller.position,
        )

    async def stop(self) -> None:
        self.stopping.set()
        for sub in self._subs:
            with contextlib.suppress(Exception):
                await sub.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._hearing_probe is not None:
            self._hearing_probe.close()
        await self.recorder.stop()
        self.controller.cancel()
        await self.leadership.release()
        await self.store.close()

    async def run(self, stopping: asyncio.Event) -> None:
        """Wait as a standby, then lead and serve until ``stopping`` is set; raises ``Deposed`` once stopped if
        another instance took over (during the start too: a fenced write there never succeeds)."""
        waits = [asyncio.ensure_future(stopping.wait()), asyncio.ensure_future(self.leadership.deposed.wait())]
        starting = asyncio.ensure_future(self.start())
        try:
            await asyncio.wait({starting, *waits}, return_when=asyncio.FIRST_COMPLETED)
            if starting.done():
                starting.result()  # a failed start raises
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for future in (starting, *waits):
                future.cancel()
            await asyncio.gather(starting, *waits, return_exceptions=True)
            # The service shell cancels its body on SIGTERM; finish stopping anyway, so that
            # no subscription is left for the connection's drain to wait out.
            stopped = asyncio.ensure_future(self.stop())
            try:
                await asyncio.shield(stopped)
            except asyncio.CancelledError:
                await stopped
                raise
        if self.leadership.deposed.is_set():
            raise Deposed(self.leadership.why)

    async def _lead(self) -> None:
        """Wait as a standby until this instance leads the log (measured: the takeover's first part)."""
        started = time.perf_counter()
        tenure = await self.leadership.acquire()
        log.info("leading (epoch %d) after %.0f ms as a standby", tenure.epoch, (time.perf_counter() - started) * 1e3)

    def _on_recorded(self, recorded: list[RecordedEvent]) -> None:
        """Newly recorded events (the controller folded them as they were appended)."""
        for record in recorded:
            if isinstance(record.event, DrainCompleted):
                self.metrics.drain.labels(record.event.outcome.value).observe(record.event.waited_ms / 1e3)

    async def _rebuild(self) -> None:
        """Fold the log into the controller: from the latest snapshot, then the events after it."""
        started = time.perf_counter()
        snapshot_at, folded = await snapshots.rebuild(self.store, self.controller, utc_now())
        log.info(
            "rebuilt the state from the log: snapshot at %d + %d events = position %d in %.0f ms (manifest v%d)",
            snapshot_at,
            folded,
            self.controller.position,
            (time.perf_counter() - started) * 1e3,
            self.controller.cluster.manifest_version,
        )

    def _start_snapshots(self) -> None:
        every_events, every_s = self.snapshot_every
        writer = snapshots.SnapshotWriter(self.store, self.controller, every_events=every_events, every_s=every_s)
        self._tasks.append(asyncio.create_task(writer.run(self.stopping), name="cluster_state snapshots"))

    async def _reseed(self) -> None:
        """Bring a stream that is behind the log back in line (see ``cluster_state.reseed``). A stream whose
        retention dropped the manifest in force is not behind: its followers start from our snapshot."""
        cluster = self.controller.cluster
        js = self.broker.connection.jetstream()
        if cluster.manifest_version == 0 or await stream_holds_manifest(js, cluster):
            return
        first = (await js.stream_info(subjects.EVENTS_STREAM)).state.first_seq
        if first > 1:
            log.info(
                "the stream starts at sequence %d, after the manifest in force (v%d): followers that start now "
                "take it from this service's snapshot (%s)",
                first,
                cluster.manifest_version,
                subjects.STATE_SNAPSHOT,
            )
            return
        events = await state_in_force(self.store)
        for event in events:
            await self.publisher.publish(event)  # same event id: the recorder skips it, the log gains nothing
        log.warning(
            "the event stream lacks manifest v%d that the log holds (a new or recreated stream): "
            "re-published %d events of the state in force from the log (the manifest, live workers, placements)",
            cluster.manifest_version,
            len(events),
        )

    async def _bootstrap(self) -> str | None:
        """Apply the bootstrap manifest to an empty log (version 1); the text of one that differs from the
        manifest in force (applied once serving, by ``_apply_given``), else None."""
        cluster = self.controller.cluster
        if self.manifest_text is None:
            if cluster.manifest_version == 0:
                log.warning("the log has no manifest and none was given (--manifest / NRT_MANIFEST): apply one")
            return None
        manifest = parse_in_force(self.manifest_text, 1)  # ManifestError: the service stops, naming the problems
        if cluster.manifest_version > 0:
            return manifest.text if manifest.digest != cluster.manifest_digest else None
        event = ManifestApplied(
            event_id=str(uuid.uuid5(BOOTSTRAP_NAMESPACE, manifest.digest)),  # a repeated bootstrap is one event
            version=1,
            cluster=manifest.cluster,
            digest=manifest.digest,
            text=manifest.text,
        )
        await self.controller.decide([event])
        await self.controller.wait_for(lambda s: s.manifest_version >= 1, within=30)
        log.info("bootstrapped manifest v1 (%s) from %s", manifest.cluster, self.manifest_file)
        return None

    async def _apply_given(self, text: str) -> None:
        """The manifest given at start differs from the one in force: swap to it (a new version), once every
        worker the log holds as alive has beaten or been declared lost (a swap warms only on live workers)."""
        c = self.controller
        limit = c.state.tuning.lost_after_s * 2 + 1.0  # a silent worker is declared lost well within this
        waited = 0.0
        while unheard(c.state) and waited < limit:
            await asyncio.sleep(self.tick_s)
            waited += self.tick_s
        current = c.cluster.manifest_version
        log.warning(
            "%s differs from manifest v%d in force: applying it as v%d (a drained swap)",
            self.manifest_file,
            current,
            current + 1,
        )
        try:
            result = await self.swapper.apply(ApplyManifest(text=text, requested_by=f"start ({self.manifest_file})"))
        except RemoteError as exc:
            log.error(
                "%s was not applied: %s. Manifest v%d still serves: fix the manifest and start again, "
                "or apply one with PUT /v1/manifest",
                self.manifest_file,
                exc.message,
                c.cluster.manifest_version,
            )
            return
        log.info("%s applied: manifest v%d -> v%d", self.manifest_file, result.from_version, result.to_version)

    async def _ticks(self) -> None:
        while True:
            await asyncio.sleep(self.tick_s)
            if not self.leadership.leads():
                continue  # the lease may have run out: decide nothing until it is renewed
            if not await self._hearing():
                self.controller.listening()  # no heartbeat can come in: nobody misses one meanwhile
                continue
            try:
                self.controller.tick()
            except Exception:
                log.exception("tick failed")

    async def _hearing(self) -> bool:
        """Whether heartbeats can reach us: our NATS server answers a ping within ``HEARING_TIMEOUT_S`` (an
        in-memory test broker always does). Deaf (its server cut off, the connection looking up), this
        controller would hear every worker and gateway fall silent at once and declare them lost, and their
        requests ``owner_lost``, though they serve on: it decides nothing until its server answers again."""
        connection = getattr(self.broker, "_connection", None)
        if connection is None:
            return True
        if self._hearing_probe is None or self._hearing_probe.connection is not connection:
            self._hearing_probe = Hearing(connection, HEARING_TIMEOUT_S)
        hearing = await self._hearing_probe.answers()
        if hearing != self._heard:
            if hearing:
                log.info("NATS answers again: deciding again")
            else:
                log.warning("no answer from NATS within %gs: deciding nothing until it answers", HEARING_TIMEOUT_S)
        self._heard = hearing
        return hearing

    async def _sweeps(self) -> None:
        while True:
            manifest = self.controller.manifest
            await asyncio.sleep(manifest.lru.sweep_interval if manifest is not None else 5.0)
            if not self.leadership.leads():
                continue
            try:
                self.controller.sweep()
            except Exception:
                log.exception("session sweep failed")

    # -- subjects --------------------------------------------------------------------------------

    async def serve_state(self, query: StateQuery) -> ClusterState:
        """The folded ClusterState, exactly what ``nrt replay`` computes from the log."""
        return self.controller.cluster

    async def serve_snapshot(self, query: StreamSnapshotQuery) -> StreamSnapshot:
        """The folded state placed on the events stream, for a follower that starts behind the stream's start."""
        return await self.controller.stream_snapshot()

    async def apply(self, request: ApplyManifest) -> ApplyResult:
        """Replace the manifest in force with a drained swap (validate, warm, drain, cut over)."""
        return await self.swapper.apply(request)

    async def what_if(self, request: WhatIf) -> WhatIfReport:
        """The candidate manifest's what-if over the recorded requests; nothing is applied."""
        return await dry_run(self.store, request)

    async def create_key(self, request: CreateKey) -> ApiKey:
        """Record a new API key (its hash) and answer it once folded."""
        return await create_key(self.controller, request)

    async def revoke_key(self, request: RevokeKey) -> ApiKey:
        """Revoke an API key and answer it once folded."""
        return await revoke_key(self.controller, request)

    async def promote(self, request: PromoteModel) -> PromoteResult:
        """Make a model resident now, demoting the least recently used first if the budget needs it."""
        return await promote(self.controller, request)


__all__ = ["ClusterStateService", "ConfigurationError", "Deposed", "ManifestError"]
