"""router_svc: routes each request with the entry model it hosts, in its own process (issue 13).

router_svc is the entry model's worker: a :class:`nrt.hosting.worker.Worker` with the
router role (it joins and beats like any worker, obeys ``nrt.control.<its id>``, reports its
tiers and serves ``nrt.infer.<entry>``), so placement loads the entry model here. It follows
the event stream for the manifests in force (each request is routed under the version the
gateway admitted it with), serves ``nrt.route`` in a queue group shared by every router_svc
instance, classifies in-process, records one ``RequestRouted`` per routed request and forwards
the request to its target with the gateway's inbox as reply subject.
"""

from __future__ import annotations

import asyncio
import socket
import uuid

from nrt.adapters.bus import subjects
from nrt.adapters.bus.emitter import EventEmitter
from nrt.adapters.bus.follow import EventFollower
from nrt.adapters.bus.outbox import Outbox
from nrt.adapters.metrics import RouterMetrics
from nrt.core.events import CONTROL_PLANE, SESSION_EVENTS
from nrt.core.vocabulary import WorkerRole
from nrt.entrypoints.service import ServiceContext
from nrt.hosting.resources import detect
from nrt.hosting.worker import Worker
from router_svc.manifests import ManifestHistory
from router_svc.routed_requests import RouteServer
from router_svc.router import Router
from router_svc.settings import RouterSettings


def router_host(ctx: ServiceContext, settings: RouterSettings) -> Worker:
    """This instance as the entry model's worker (the router role)."""
    return Worker(
        ctx.broker,
        detect(settings.router_ram),
        worker_id=settings.router_worker_id or f"router-{socket.gethostname()}-{uuid.uuid4().hex[:6]}",
        max_batch_size=settings.router_max_batch,
        ort_threads=settings.router_ort_threads,
        heartbeat_s=settings.heartbeat_s,
        role=WorkerRole.ROUTER,
        registry=ctx.registry,  # router_svc's metrics port shows its router host's too
        nats_replicas=settings.nats_replicas,
    )


async def run(ctx: ServiceContext, settings: RouterSettings | None = None, host: Worker | None = None) -> None:
    settings = settings or RouterSettings.from_env()
    host = host or router_host(ctx, settings)
    follower = EventFollower(ctx.broker)
    manifests = ManifestHistory(follower)
    await follower.start(types=(*CONTROL_PLANE, *SESSION_EVENTS))  # sessions: where each one's KV is
    emitter = EventEmitter(ctx.nc, outbox=Outbox.open(settings.home, "router_svc"), service="router_svc")
    await emitter.start()
    await host.start()
    router = Router(ctx.nc, manifests, emitter, host, settings, RouterMetrics(ctx.registry))
    server = RouteServer(ctx.nc, subjects.ROUTE, router.handle, settings.queue)
    await server.start()
    heartbeats = asyncio.create_task(host.run_heartbeats(ctx.stopping))
    try:
        await ctx.stopping.wait()
    finally:
        await server.stop()
        await heartbeats
        await host.stop()
        await emitter.close()
