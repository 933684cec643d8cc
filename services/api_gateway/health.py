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

from api_gateway.cluster_link import ClusterLink
from api_gateway.errors import ApiError
from api_gateway.openai_types import ModelFailure, Readiness
from nrt.adapters.bus.broker import call
from nrt.adapters.bus.errors import RemoteError
from nrt.core.protocol import Health, HealthQuery
from nrt.core.routing.readiness import FailedModel, models_readiness
from nrt.entrypoints.service import health_subject

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
    description=(
        "Ready when every check is `ok`: each model a routed request can reach is held by a live worker, "
        "and every other model too unless its load failed. `failed` lists the models whose load failed on "
        "every live worker that could hold them, each with its last failure; `required` ones keep the "
        "cluster from being ready until a retry loads them (`nrt up` gives up on them)."
    ),
    responses={503: ResponseSpec(Readiness, description="Not ready: `checks` says what is wrong.")},
)
async def readyz(cluster_link: NamedDependency[ClusterLink]) -> Response[Readiness]:
    checks, failed = await readiness_checks(cluster_link)
    ready = all(v == "ok" for v in checks.values())
    body = Readiness(
        status="ready" if ready else "not_ready", checks=checks, instance=cluster_link.settings.instance, failed=failed
    )
    return Response(body, status_code=200 if ready else 503)


async def readiness_checks(cluster_link: ClusterLink) -> tuple[dict[str, str], list[ModelFailure]]:
    """Each check's verdict, and the models whose load failed on every live worker that could hold them."""
    bus = cluster_link.bus
    if bus is None or not bus.nc.is_connected:
        reason = f"not connected to {cluster_link.settings.nats_url}"
        unknown = "unknown (no NATS)"
        return {"nats": reason, "router": unknown, "manifest": unknown, "models": unknown}, []
    checks = {"nats": "ok"}
    try:
        await call(bus.broker, health_subject(ROUTER_SERVICE), HealthQuery(), Health, timeout=PROBE_TIMEOUT)
        checks["router"] = "ok"
    except RemoteError as exc:
        checks["router"] = exc.message
    try:
        manifest = bus.gate.manifest()
    except ApiError as exc:
        checks["manifest"] = checks["models"] = exc.message
        return checks, []
    checks["manifest"] = "ok"
    models = models_readiness(bus.follower.state, manifest)
    checks["models"] = models.describe()
    return checks, [model_failure(failed) for failed in models.failed]


def model_failure(failed: FailedModel) -> ModelFailure:
    f = failed.failure
    return ModelFailure(model=failed.model_id, required=failed.required, worker_id=f.worker_id, error=f.error, at=f.at)
