"""cluster_state: the event log's recorder and the policies' shell.

Start-up: migrate the database, take the leader lock (one instance records at a time),
fold the PostgreSQL log into the state, start the durable JetStream consumer and fold
its backlog; when the stream lacks the manifest in force (a new or recreated stream),
re-publish from the log the state the other services fold (``reseed``); then — on a
first start with an empty log — apply the bootstrap manifest as ``ManifestApplied``
version 1. Then serve:

- ``nrt.state.get``: the folded ``ClusterState`` (exactly what ``nrt replay`` computes);
- ``nrt.manifest.apply``: the drained manifest swap (``ApplyManifest`` -> ``ApplyResult``);
- ``nrt.models.promote``: make a model resident within the budget (``PromoteModel``);
- heartbeats on ``nrt.workers.heartbeat``; a tick for liveness and placement, a sweep
  for the session LRU.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid

import msgspec
import psycopg
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from cluster_state.controller import Controller, parse_in_force, utc_now
from cluster_state.recorder import Recorder
from cluster_state.reseed import state_in_force, stream_holds_manifest
from cluster_state.swap import Swapper, outcomes
from nrt.bus import rpc, subjects
from nrt.bus.errors import RemoteError, Unavailable
from nrt.bus.jetstream import EventPublisher
from nrt.events import ManifestApplied
from nrt.infra.pgurl import to_libpq
from nrt.manifest import ManifestError
from nrt.policies import ControlState, PromoteWanted, Tuning
from nrt.policies.placement import where
from nrt.protocol import ApplyManifest, PromoteModel, PromoteResult
from nrt.store import EventStore, upgrade

log = logging.getLogger("nrt.cluster_state")

LEADER_LOCK_KEY = 0x6E72_7463  # "nrtc": one cluster_state records and acts at a time
BOOTSTRAP_NAMESPACE = uuid.UUID("5f0c3b7e-3c1a-4d59-9d0e-6e7274000001")
_REFUSAL_STATUS = {"unknown_model": 404, "not_placed": 503, "budget_exhausted": 503}


class ConfigurationError(Exception):
    """cluster_state cannot start as configured; the message says what to set."""


class ClusterStateService:
    def __init__(
        self,
        nc: Client,
        database_url: str,
        *,
        manifest_text: str | None = None,
        manifest_file: str = "the bootstrap manifest",
        tuning: Tuning | None = None,
        tick_s: float = 0.5,
    ) -> None:
        self.nc = nc
        self.database_url = database_url
        self.manifest_text = manifest_text
        self.manifest_file = manifest_file
        self.tick_s = tick_s
        self.stopping = asyncio.Event()
        self.store = EventStore.connect(database_url)
        self.publisher = EventPublisher(nc)
        self.controller = Controller(nc, self.publisher, ControlState(started_at=utc_now(), tuning=tuning or Tuning()))
        self.swapper = Swapper(self.controller)
        self.recorder = Recorder(nc, self.store, self.controller.on_recorded)
        self._leader: psycopg.AsyncConnection[tuple[object, ...]] | None = None
        self._subs: list[Subscription] = []
        self._tasks: list[asyncio.Task[None]] = []

    # -- life cycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        await asyncio.to_thread(upgrade, self.database_url)
        await self._lead()
        started = time.perf_counter()
        now = utc_now()
        async for position, event in self.store.replay():
            self.controller.rebuild(position, event, now)
        log.info(
            "rebuilt the state from the log: %d events in %.0f ms (manifest v%d)",
            self.controller.position,
            (time.perf_counter() - started) * 1e3,
            self.controller.cluster.manifest_version,
        )
        await self.recorder.start()
        self._tasks.append(asyncio.create_task(self.recorder.run(self.stopping), name="cluster_state recorder"))
        await self.recorder.caught_up.wait()
        await self._reseed()
        await self._bootstrap()
        self._subs += [
            await self.nc.subscribe(subjects.STATE, cb=self._serve_state),
            await rpc.serve(self.nc, subjects.MANIFEST_APPLY, ApplyManifest, self.swapper.apply, concurrent=True),
            await rpc.serve(self.nc, subjects.PROMOTE, PromoteModel, self.promote, concurrent=True),
            await self.nc.subscribe(subjects.WORKER_HEARTBEAT, cb=self.controller.on_heartbeat),
        ]
        self.controller.acting = True
        self._tasks.append(asyncio.create_task(self._ticks(), name="cluster_state ticks"))
        self._tasks.append(asyncio.create_task(self._sweeps(), name="cluster_state sweeps"))
        log.info(
            "cluster_state recording from stream sequence %d, log at %d",
            self.recorder.sequence,
            self.controller.position,
        )

    async def stop(self) -> None:
        self.stopping.set()
        for sub in self._subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.recorder.stop()
        self.controller.cancel()
        await self.store.close()
        if self._leader is not None:
            await self._leader.close()

    async def run(self, stopping: asyncio.Event) -> None:
        await self.start()
        try:
            await stopping.wait()
        finally:
            # The service shell cancels its body on SIGTERM; finish stopping anyway, so that
            # no subscription is left for the connection's drain to wait out.
            stopped = asyncio.ensure_future(self.stop())
            try:
                await asyncio.shield(stopped)
            except asyncio.CancelledError:
                await stopped
                raise

    async def _lead(self) -> None:
        """Hold a session advisory lock for our lifetime: a second instance waits instead of interleaving."""
        self._leader = await psycopg.AsyncConnection.connect(to_libpq(self.database_url), autocommit=True)
        announced = False
        while True:
            cursor = await self._leader.execute("SELECT pg_try_advisory_lock(%s)", (LEADER_LOCK_KEY,))
            row = await cursor.fetchone()
            if row is not None and row[0]:
                return
            if not announced:
                log.warning("another cluster_state instance holds the leader lock; waiting for it to stop")
                announced = True
            await asyncio.sleep(1.0)

    async def _reseed(self) -> None:
        """Bring a stream that is behind the log back in line (see ``cluster_state.reseed``)."""
        cluster = self.controller.cluster
        if cluster.manifest_version == 0 or await stream_holds_manifest(self.nc.jetstream(), cluster):
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

    async def _bootstrap(self) -> None:
        cluster = self.controller.cluster
        if self.manifest_text is None:
            if cluster.manifest_version == 0:
                log.warning("the log has no manifest and none was given (--manifest / NRT_MANIFEST): apply one")
            return
        manifest = parse_in_force(self.manifest_text, 1)  # ManifestError: the service stops, naming the problems
        if cluster.manifest_version > 0:
            if manifest.digest != cluster.manifest_digest:
                log.info(
                    "the log holds manifest v%d; %s is ignored on restart (swap manifests with PUT /v1/manifest)",
                    cluster.manifest_version,
                    self.manifest_file,
                )
            return
        event = ManifestApplied(
            event_id=str(uuid.uuid5(BOOTSTRAP_NAMESPACE, manifest.digest)),  # a repeated bootstrap is one event
            version=1,
            cluster=manifest.cluster,
            digest=manifest.digest,
            text=manifest.text,
        )
        await self.publisher.publish(event)
        await self.controller.wait_for(lambda s: s.manifest_version >= 1, within=30)
        log.info("bootstrapped manifest v1 (%s) from %s", manifest.cluster, self.manifest_file)

    async def _ticks(self) -> None:
        while True:
            await asyncio.sleep(self.tick_s)
            try:
                self.controller.tick()
            except Exception:
                log.exception("tick failed")

    async def _sweeps(self) -> None:
        while True:
            manifest = self.controller.manifest
            await asyncio.sleep(manifest.lru.sweep_interval if manifest is not None else 5.0)
            try:
                self.controller.sweep()
            except Exception:
                log.exception("session sweep failed")

    # -- subjects --------------------------------------------------------------------------------

    async def _serve_state(self, msg: Msg) -> None:
        """Any request (a StateQuery, or an empty body) gets the folded ClusterState."""
        if msg.reply:
            await self.nc.publish(
                msg.reply, msgspec.json.encode(self.controller.cluster), headers={rpc.FRAME: rpc.DATA}
            )

    async def promote(self, request: PromoteModel) -> PromoteResult:
        c = self.controller
        started = time.perf_counter()
        if request.manifest_version > c.cluster.manifest_version:
            # The gateway admits requests under a new version as soon as it sees ManifestApplied;
            # our fold has it once the recorder has written it: decide under that version.
            with contextlib.suppress(TimeoutError):
                await c.wait_for(lambda s: s.manifest_version >= request.manifest_version, within=10)
        tasks = c.react(PromoteWanted(model_id=request.model_id, reason=request.reason, worker_id=request.worker_id))
        results = await outcomes(tasks)
        for outcome in results:
            if outcome.refused is not None:
                refused = outcome.refused
                raise RemoteError(refused.code, refused.reason, _REFUSAL_STATUS.get(refused.code, 503))
            if outcome.error is not None:
                raise Unavailable(
                    f"promoting {request.model_id} failed: {outcome.error.message}", code="promotion_failed"
                )
        worker_id = request.worker_id
        if worker_id is None or c.state.tier_of(request.model_id, worker_id) == "unloaded":
            worker_id = where(c.state, request.model_id)
        if worker_id is None:
            raise Unavailable(f"model '{request.model_id}' is not placed on any live worker", code="not_placed")
        if not results and c.state.tier_of(request.model_id, worker_id) not in ("resident", "remote"):
            # another promotion of this model is in flight: wait for it to show in the log
            try:
                await c.wait_for(
                    lambda s: (
                        any(p.tier == "resident" for p in s.models[request.model_id].placements.values())
                        if request.model_id in s.models
                        else False
                    ),
                    within=60,
                )
            except TimeoutError:
                raise Unavailable(
                    f"model '{request.model_id}' did not become resident within 60s", code="promotion_timeout"
                ) from None
        demoted = tuple(r.model_id for o in results for r in o.replies if r.model_id != request.model_id)
        return PromoteResult(
            model_id=request.model_id,
            worker_id=worker_id,
            tier=c.state.tier_of(request.model_id, worker_id),
            demoted=demoted,
            elapsed_ms=(time.perf_counter() - started) * 1e3,
        )


def tuning_from_env(environ: dict[str, str]) -> Tuning:
    default = Tuning()
    return Tuning(
        heartbeat_s=float(environ.get("NRT_HEARTBEAT_S", default.heartbeat_s)),
        missed_beats=int(environ.get("NRT_MISSED_HEARTBEATS", default.missed_beats)),
    )


__all__ = ["ClusterStateService", "ConfigurationError", "ManifestError", "tuning_from_env"]
