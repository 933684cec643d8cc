"""router_svc: classifies a routed request with the entry model and dispatches it (issue 4).

Follows the event stream for the manifests in force (each request is routed under the
version the gateway admitted it with), serves ``nrt.route`` in a queue group, and
records ``RouterFired`` / ``RequestDispatched`` events.
"""

from __future__ import annotations

from nrt.bus import subjects
from nrt.bus.emitter import EventEmitter
from nrt.bus.follow import EventFollower
from nrt.events import CONTROL_PLANE
from nrt.service import ServiceContext
from router_svc.manifests import ManifestHistory
from router_svc.relay import RouteServer
from router_svc.router import Router
from router_svc.settings import RouterSettings


async def run(ctx: ServiceContext, settings: RouterSettings | None = None) -> None:
    settings = settings or RouterSettings.from_env()
    follower = EventFollower(ctx.broker)
    manifests = ManifestHistory(follower)
    await follower.start(types=CONTROL_PLANE)
    emitter = EventEmitter(ctx.nc)
    await emitter.start()
    router = Router(ctx.nc, manifests, emitter, settings)
    server = RouteServer(ctx.nc, subjects.ROUTE, router.handle, settings.queue)
    await server.start()
    try:
        await ctx.stopping.wait()
    finally:
        await server.stop()
        await emitter.close()
