"""``GET /metrics``: the gateway's Prometheus metrics, open like ``/healthz`` (no API key).

The request figures (``nrt.metrics.GatewayMetrics``) are recorded by each admitted request
(``api_gateway.completions``); bytes per worker and tier against the budgets are computed at
each scrape from the gateway's fold of the control-plane events.
"""

from __future__ import annotations

from litestar import Response, get
from litestar.di import NamedDependency
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from api_gateway.runtime import Runtime


@get("/metrics", summary="Prometheus metrics of the gateway (text exposition format)", include_in_schema=True)
async def metrics(runtime: NamedDependency[Runtime]) -> Response[bytes]:
    return Response(generate_latest(runtime.metrics.registry), media_type=CONTENT_TYPE_LATEST)
