"""Liveness (``/health`` and ``/healthz``: the process answers) and readiness (``/readyz``: it can serve).

``/health`` is vLLM's liveness route, which load generators (guidellm, aiperf) and the common
Kubernetes templates for OpenAI-compatible servers probe by default: a 200 with an empty body,
as vLLM answers. ``/healthz`` says the same as JSON.
"""

from __future__ import annotations

import msgspec
from litestar import MediaType, Response, get
from litestar.di import NamedDependency
from litestar.openapi import ResponseSpec

from api_gateway.errors import ApiError
from api_gateway.openai_types import Readiness
from api_gateway.runtime import Runtime
from nrt.bus.broker import call
from nrt.bus.errors import RemoteError
from nrt.routing import serving_workers
from nrt.service import Health, HealthQuery, health_subject

ROUTER_SERVICE = "router_svc"
PROBE_TIMEOUT = 1.0


class Healthz(msgspec.Struct, frozen=True):
    status: str


@get(
    "/health",
    summary="Liveness, as vLLM answers it: 200 with an empty body while the gateway process answers",
    media_type=MediaType.TEXT,
    responses={200: ResponseSpec(None, description="The gateway process is live (an empty body).")},
)
async def health() -> Response[bytes]:
    return Response(b"", status_code=200, media_type=MediaType.TEXT)


@get("/healthz", summary="Liveness: the gateway process answers")
async def healthz() -> Healthz:
    return Healthz(status="ok")


@get(
    "/readyz",
    summary="Readiness: NATS connected, router_svc reachable, a manifest in force, its models served",
    responses={503: ResponseSpec(Readiness, description="Not ready: `checks` says what is wrong.")},
)
async def readyz(runtime: NamedDependency[Runtime]) -> Response[Readiness]:
    checks = await readiness_checks(runtime)
    ready = all(v == "ok" for v in checks.values())
    body = Readiness(status="ready" if ready else "not_ready", checks=checks, instance=runtime.settings.instance)
    return Response(body, status_code=200 if ready else 503)


async def readiness_checks(runtime: Runtime) -> dict[str, str]:
    bus = runtime.bus
    if bus is None or not bus.nc.is_connected:
        reason = f"not connected to {runtime.settings.nats_url}"
        unknown = "unknown (no NATS)"
        return {"nats": reason, "router": unknown, "manifest": unknown, "models": unknown}
    checks = {"nats": "ok"}
    try:
        await call(bus.broker, health_subject(ROUTER_SERVICE), HealthQuery(), Health, timeout=PROBE_TIMEOUT)
        checks["router"] = "ok"
    except RemoteError as exc:
        checks["router"] = exc.message
    state = bus.follower.state
    try:
        manifest = bus.gate.manifest()
    except ApiError as exc:
        checks["manifest"] = checks["models"] = exc.message
        return checks
    checks["manifest"] = "ok"
    waiting = [spec.id for spec in manifest.models if not serving_workers(state, spec.id)]
    checks["models"] = "ok" if not waiting else f"no live worker serves {', '.join(waiting)} yet"
    return checks
