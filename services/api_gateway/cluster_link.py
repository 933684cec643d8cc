"""The gateway's connection to the cluster: its FastStream broker, the folded event stream, the event emitter.

The HTTP server starts at once (``/healthz`` answers); the NATS connection is made in the
background and retried until it succeeds, and ``/readyz`` says when it is ready. A
request that needs the bus before then gets a 503.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
import uuid
from dataclasses import dataclass

from faststream.nats import NatsBroker
from nats.aio.client import Client

from api_gateway import worker_reconnects
from api_gateway.admission import AdmissionGate
from api_gateway.errors import ApiError
from api_gateway.reply_stream import Inboxes, not_connected
from api_gateway.settings import GatewaySettings
from api_gateway.shared_limits import LeaseTerms, SharedRateLimiter
from api_gateway.worker_reconnects import ReconnectCounts
from nrt.adapters.bus import subjects
from nrt.adapters.bus.broker import start_broker
from nrt.adapters.bus.connection import credentials_of
from nrt.adapters.bus.emitter import EventEmitter
from nrt.adapters.bus.follow import EventFollower
from nrt.adapters.bus.jetstream import ensure_events_stream, ensure_kv_bucket
from nrt.adapters.bus.kv import JetStreamCas
from nrt.adapters.bus.outbox import Outbox
from nrt.adapters.bus.replication import replicas_for
from nrt.adapters.metrics import ClusterCollector, GatewayMetrics
from nrt.core.events import CONTROL_PLANE, AnyEvent, WorkerLost
from nrt.core.manifest import Manifest
from nrt.core.protocol import GatewayHeartbeat
from nrt.core.state import ClusterState

log = logging.getLogger("api_gateway")
RATE_LIMITS_DESCRIPTION = "NRT: each API key's rate-limit buckets, shared by every api_gateway"


@dataclass(frozen=True, slots=True)
class Bus:
    broker: NatsBroker  # the control plane (state, manifest swaps, health) on FastStream
    follower: EventFollower
    gate: AdmissionGate
    emitter: EventEmitter
    inboxes: Inboxes
    limiter: SharedRateLimiter  # per API key, shared with every other gateway

    @property
    def nc(self) -> Client:
        """The broker's connection: the raw hot path (route, token frames) and JetStream."""
        return self.broker.connection


def _end_on_loss(inboxes: Inboxes, reconnects: ReconnectCounts, event: AnyEvent) -> None:
    """A worker the log says is lost answers nothing more: end its requests now, not at a timeout."""
    if isinstance(event, WorkerLost):
        reconnects.forget(event.worker_id)
        ended = inboxes.worker_lost(event.worker_id, event.reason.value)
        if ended:
            log.warning("worker %s was lost (%s): ended %d request(s) on it", event.worker_id, event.reason, ended)


class ClusterLink:
    def __init__(self, settings: GatewaySettings) -> None:
        self.settings = settings
        # this process, as its RequestAdmitted events and its heartbeats name it: a request has an owner while it beats
        self.gateway_id = f"gateway-{socket.gethostname()}-{uuid.uuid4().hex[:8]}"
        self.metrics = GatewayMetrics()  # this gateway's registry: GET /metrics
        self.metrics.registry.register(ClusterCollector(self._cluster, self._manifest))
        self.bus: Bus | None = None
        self.connected = asyncio.Event()
        self.closing = asyncio.Event()  # the server is stopping: open-ended streams (the events feed) end
        self._task: asyncio.Task[None] | None = None
        self._beats: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._connect())

    async def _connect(self) -> None:
        delay = 0.2
        while True:
            try:
                broker = await start_broker(
                    self.settings.nats_url,
                    "api_gateway",
                    credentials=credentials_of(self.settings),
                    on_disconnect=self._bus_lost,
                )
                break
            except ConnectionError as exc:
                log.warning("%s; retrying in %.1fs", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
        nc = broker.connection
        while True:
            try:
                js = nc.jetstream()
                replicas = replicas_for(nc, self.settings.nats_replicas)
                await ensure_events_stream(js, replicas=replicas)
                limits = await ensure_kv_bucket(
                    js, subjects.RATE_LIMITS_BUCKET, RATE_LIMITS_DESCRIPTION, replicas=replicas
                )
                follower = EventFollower(broker)
                gate = AdmissionGate(follower)
                await follower.start(types=CONTROL_PLANE)
                break
            except Exception as exc:  # JetStream not ready yet
                log.warning("cannot follow the event stream yet: %s", exc)
                await asyncio.sleep(1.0)
        emitter = EventEmitter(nc, outbox=Outbox.open(self.settings.home, "api_gateway"), service="api_gateway")
        await emitter.start()
        inboxes = Inboxes(nc)
        await inboxes.start()
        reconnects = ReconnectCounts()
        await worker_reconnects.watch(nc, inboxes, reconnects)
        follower.listen(lambda event, _: _end_on_loss(inboxes, reconnects, event))
        terms = LeaseTerms(share=self.settings.rate_lease_share, lease_s=self.settings.rate_lease_s)
        limiter = SharedRateLimiter(JetStreamCas(limits), terms)
        self.bus = Bus(broker=broker, follower=follower, gate=gate, emitter=emitter, inboxes=inboxes, limiter=limiter)
        self._beats = asyncio.create_task(self._heartbeats(broker), name="api_gateway heartbeats")
        self.connected.set()
        log.info("api_gateway connected to %s", self.settings.nats_url)

    async def _heartbeats(self, broker: NatsBroker) -> None:
        """Say that this gateway is alive, every ``heartbeat_s``: cluster_state ends the requests of a gateway
        that has stopped (``nrt.core.policies.owners``)."""
        publisher = broker.publisher(subjects.GATEWAY_HEARTBEAT, schema=GatewayHeartbeat)
        while True:
            try:
                await publisher.publish(GatewayHeartbeat(gateway_id=self.gateway_id, sent_at=time.time()))
            except Exception as exc:  # the connection is down: the next beat tries again
                log.debug("heartbeat not sent: %s", exc)
            await asyncio.sleep(self.settings.heartbeat_s)

    def _bus_lost(self) -> None:
        """The NATS connection dropped: end the requests in flight now, not at their deadlines."""
        if self.bus is not None and (ended := self.bus.inboxes.bus_lost(self.settings.nats_url)):
            log.warning("the connection to NATS dropped: ended %d request(s) in flight", ended)

    def _cluster(self) -> ClusterState:
        return self.bus.follower.state if self.bus is not None else ClusterState()

    def _manifest(self) -> Manifest | None:
        return self.bus.follower.manifest if self.bus is not None else None

    def require(self) -> Bus:
        """The bus, or 503 while the gateway is not connected."""
        bus = self.bus
        if bus is None or not bus.nc.is_connected:
            raise ApiError.from_remote(not_connected(self.settings.nats_url))
        return bus

    async def stop(self) -> None:
        for task in (self._task, self._beats):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        bus = self.bus
        if bus is not None:
            await bus.limiter.close()
            await bus.emitter.close()
            with contextlib.suppress(Exception):
                await bus.broker.stop()
