"""The specialist worker: its three jobs on the bus, and every transport call they need.

The same worker, with the router role, is the entry model's worker inside router_svc.

- :class:`Presence` joins, beats, leaves and publishes the jobs' events in the background;
- :class:`Control` obeys ``nrt.control.<worker_id>`` (tier commands, stepped by :class:`Tiers`)
  and promotes a model a request waits for, within the budget;
- :class:`Serving` answers ``nrt.infer.<model_id>`` (generate, classify, embed) for each
  model this worker hosts, in the queue group that spreads a model's requests over workers, and
  ``nrt.infer.<model_id>.<worker_id>``, where router_svc sends a session's turns to the worker
  holding its KV (``nrt.core.routing.affinity``); the two share the model's ``max_queue``.

The jobs are plain typed handlers; this module connects them to the bus. The control plane
(control commands, heartbeats, the promote request to cluster_state) is on the service's
FastStream broker; the hot path (``nrt.infer.<model_id>``, streamed to the caller's inbox)
is on raw nats-py over the broker's connection (``nrt.adapters.bus.rpc``; ``bench.gateway`` measures why).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from contextlib import aclosing
from typing import cast

import msgspec
from faststream.nats import NatsBroker
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from prometheus_client import CollectorRegistry

from nrt.adapters.bus import broker as bus
from nrt.adapters.bus import rpc, subjects
from nrt.adapters.bus.contract import Service
from nrt.adapters.bus.errors import DeadlineExceeded
from nrt.adapters.bus.follow import EventFollower
from nrt.adapters.bus.jetstream import EventPublisher
from nrt.adapters.inference import ArtifactRegistry, Spin
from nrt.adapters.inference.batching import DEFAULT_PREFIX_CACHE_BYTES
from nrt.adapters.metrics import WorkerMetrics
from nrt.core.events import ManifestApplied
from nrt.core.manifest import ModelSpec
from nrt.core.protocol import (
    Accepted,
    Cancel,
    ClassifyRequest,
    EmbedRequest,
    GenerateRequest,
    InferRequest,
    PromoteModel,
    PromoteResult,
    WorkerHeartbeat,
    embed_frames,
)
from nrt.core.vocabulary import Reason, WorkerRole
from nrt.hosting.artifact_share import ArtifactShare
from nrt.hosting.control import Control
from nrt.hosting.device_memory import DeviceMemory, memory_of
from nrt.hosting.model_host import ModelHost
from nrt.hosting.presence import Presence
from nrt.hosting.remote.policy import RemotePolicy
from nrt.hosting.remote.transport import RemoteClient
from nrt.hosting.resources import HostResources
from nrt.hosting.serving import Serving
from nrt.hosting.tiers import Tiers

log = logging.getLogger("nrt.worker")


def role_service(role: WorkerRole) -> Service:
    """The service a worker of ``role`` runs in: whose event subjects (and bus credentials) it uses."""
    return "router_svc" if role is WorkerRole.ROUTER else "specialist_worker"


class Worker:
    def __init__(
        self,
        broker: NatsBroker,
        resources: HostResources,
        worker_id: str | None = None,
        max_batch_size: int = 16,
        heartbeat_s: float = 0.5,
        ort_threads: int | None = None,
        ort_spin: Spin = "never",
        promote_timeout: float = 60.0,
        role: WorkerRole = WorkerRole.SPECIALIST,
        max_queue: int = 64,
        remote: RemotePolicy | None = None,
        registry: CollectorRegistry | None = None,
        memory: DeviceMemory | None = None,
        share_artifacts: bool = True,
        nats_replicas: int | None = None,  # copies of the buckets it creates (None: by the NATS cluster's size)
        prefix_cache_bytes: int = DEFAULT_PREFIX_CACHE_BYTES,  # shared prompt prefixes' KV per model (0: none)
    ) -> None:
        self.broker = broker
        self.max_queue = max_queue  # requests per model queued or running here; more are refused (overloaded)
        self.worker_id = worker_id or f"{resources.host}-{uuid.uuid4().hex[:6]}"
        self.metrics = WorkerMetrics(self.worker_id, registry)  # registry: its service's (default: its own)
        self.host = ModelHost(
            ArtifactRegistry(resources.providers, intra_op_threads=ort_threads, spin=ort_spin),
            max_batch_size=max_batch_size,
            batch_observer=self.metrics.batch_observer,
            prefix_cache_bytes=prefix_cache_bytes,
            memory=memory if memory is not None else memory_of(resources.device),
        )
        self.metrics.watch(self.host.loads)
        self.promote_timeout = promote_timeout  # how long a request waits for cluster_state to make room
        self.manifest = EventFollower(broker)
        self._heartbeats = broker.publisher(subjects.WORKER_HEARTBEAT, schema=WorkerHeartbeat)
        self._subscriptions: dict[str, tuple[Subscription, ...]] = {}  # model id -> its infer subjects
        self._cancels: Subscription | None = None
        self.presence = Presence(
            self.worker_id,
            resources,
            self.host,
            EventPublisher(self.nc, service=role_service(role)),
            self._send_heartbeat,
            heartbeat_s,
            role,
        )
        remote = remote or RemotePolicy()
        # prepared artifacts over the bus: fetched from the cluster before preparing, published after
        self.artifacts = ArtifactShare(self.nc, nats_replicas) if share_artifacts else None
        self.tiers = Tiers(
            self.worker_id,
            self.host,
            self.presence,
            self.spec,
            self,
            self._loaded,
            self.metrics,
            hub_url=remote.hf_inference_url,
            share=self.artifacts,
        )
        self.control = Control(self.worker_id, self.host, self.tiers, self.presence, self._ask_promotion)
        self.serving = Serving(
            self.worker_id,
            self.host,
            self.control,
            self.presence,
            self.spec,
            lambda: self.manifest.manifest,
            RemoteClient(remote),
        )
        self.started = asyncio.Event()  # set once it has joined and obeys control commands
        self.started_at = 0.0  # time.monotonic() when it started

    @property
    def nc(self) -> Client:
        """The broker's connection: the raw hot path and JetStream."""
        return self.broker.connection

    # -- life cycle ------------------------------------------------------------------------

    async def start(self) -> None:
        if self.artifacts is not None:
            await self.artifacts.start()
        await self.manifest.start(types=(ManifestApplied,), latest_only=True)
        await bus.serve(
            self.broker,
            subjects.control(self.worker_id),
            self.control.handle,
            title=f"worker {self.worker_id}: control",
        )
        self._cancels = await self.nc.subscribe(subjects.CANCEL, cb=self._on_cancel)
        await self.presence.join()
        self.started_at = time.monotonic()
        self.started.set()
        providers = ", ".join(self.presence.resources.providers)
        log.info("%s worker %s ready (%s)", self.presence.role.value, self.worker_id, providers)

    async def run_heartbeats(self, stopping: asyncio.Event) -> None:
        await self.presence.run_heartbeats(stopping)

    async def heartbeat(self) -> None:
        await self.presence.beat()

    async def stop(self) -> None:
        for subs in self._subscriptions.values():
            for sub in subs:
                await sub.unsubscribe()
        if self._cancels is not None:
            await self._cancels.unsubscribe()
        await self.presence.leave(Reason.SHUTDOWN)
        if self.artifacts is not None:
            await self.artifacts.settle()  # an upload under way finishes: another host may be waiting for it
        await self.serving.remote.aclose()
        await asyncio.to_thread(self.host.close)

    def spec(self, model_id: str) -> ModelSpec | None:
        """``model_id``'s spec in the manifest in force; None before the first manifest or if it has none."""
        manifest = self.manifest.manifest
        if manifest is None:
            return None
        try:
            return manifest.model(model_id)
        except KeyError:
            return None

    # -- the model subjects (ports.ModelSubjects, for Tiers) ----------------------------------

    async def subscribe(self, model_id: str) -> None:
        if model_id not in self._subscriptions:
            running: set[asyncio.Task[None]] = set()  # the model's requests here, on either subject
            kind = cast(type[GenerateRequest], InferRequest)
            shared = await rpc.serve_stream(
                self.nc, subjects.infer(model_id), kind, self._infer, subjects.INFER_QUEUE, self.max_queue, running
            )
            own = await rpc.serve_stream(
                self.nc, subjects.infer_at(model_id, self.worker_id), kind, self._infer, "", self.max_queue, running
            )
            self._subscriptions[model_id] = (shared, own)

    async def unsubscribe(self, model_id: str) -> None:
        self.serving.forget(model_id)
        for sub in self._subscriptions.pop(model_id, ()):
            await sub.unsubscribe()

    # -- transport -----------------------------------------------------------------------------

    async def _infer(self, request: InferRequest, inbox: rpc.StreamInbox) -> None:
        received_at = time.time()
        with self.serving.active(request.model_id):
            if isinstance(request, GenerateRequest):
                await stream_answer(self.serving, request, inbox, received_at)
            elif isinstance(request, ClassifyRequest):
                await inbox.send(await self.serving.classify(request), last=True)
            elif isinstance(request, EmbedRequest):
                frames = embed_frames(await self.serving.embed(request), self.nc.max_payload)
                for i, frame in enumerate(frames):  # a large batch's vectors take several messages
                    await inbox.send(frame, last=i == len(frames) - 1)

    async def _on_cancel(self, msg: Msg) -> None:
        try:
            cancel = _cancels.decode(msg.data)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            log.warning("ignoring an invalid cancel: %s", exc)
            return
        self.serving.inflight.cancel(cancel.request_id, cancel.reason)

    async def _send_heartbeat(self, beat: WorkerHeartbeat) -> None:
        reconnects = int(self.nc.stats["reconnects"])
        await self._heartbeats.publish(msgspec.structs.replace(beat, bus_reconnects=reconnects))

    async def _loaded(self, model_id: str) -> None:
        await self.serving.calibrate_at_load(model_id)

    async def _ask_promotion(self, ask: PromoteModel) -> PromoteResult:
        return await bus.call(self.broker, subjects.PROMOTE, ask, PromoteResult, timeout=self.promote_timeout)


_cancels = msgspec.json.Decoder(Cancel)


async def stream_answer(serving: Serving, request: GenerateRequest, inbox: rpc.StreamInbox, received_at: float) -> None:
    """Stream ``request``'s answer to ``inbox`` (the caller's, often someone else's): each chunk stamped
    with when the request arrived (``received_at``, unix time) and when it leaves; the first one carries
    the router's decision back to the gateway (``GenerateRequest.route``), so it needs no message of its own.

    First an ``Accepted`` frame says which worker took the request and how fast the model decodes
    here. The answer stops at the request's deadline (an error frame) or when the request is
    cancelled (``Serving.inflight``); the batch drops its row before the next decode step."""
    hosted = serving.host.get(request.model_id)
    await inbox.accept(
        Accepted(
            request_id=request.request_id,
            model_id=request.model_id,
            worker_id=serving.worker_id,
            decode_tokens_per_s=hosted.decode_tokens_per_s,
        )
    )
    route = request.route
    sent = 0
    remaining = request.deadline - time.time() if request.deadline is not None else None
    try:
        with serving.inflight.running(request.request_id):
            async with asyncio.timeout(remaining), aclosing(serving.generate(request)) as chunks:
                async for chunk in chunks:
                    stamped = msgspec.structs.replace(chunk, route=route, received_at=received_at, sent_at=time.time())
                    route = None
                    sent += 1
                    if chunk.timings is not None and chunk.usage is not None and chunk.usage.completion_tokens > 1:
                        hosted.observe_speed(chunk.timings.decode_tokens_per_s)
                    await inbox.send(stamped, last=chunk.finish_reason is not None)
    except TimeoutError:
        raise DeadlineExceeded(
            f"request {request.request_id} reached its deadline on worker {serving.worker_id} after {sent} chunk(s)"
        ) from None
