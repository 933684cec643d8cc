"""``GET /metrics``: the gateway's Prometheus metrics, open like ``/healthz`` (no API key).

The request figures (``nrt.adapters.metrics.GatewayMetrics``) are recorded by each admitted request
(``api_gateway.completions``); bytes per worker and tier against the budgets are computed at
each scrape from the gateway's fold of the control-plane events. The format follows the
scraper's ``Accept`` header, as ``prometheus_client``'s own server does (text, or OpenMetrics).
"""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, get
from litestar.di import NamedDependency
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.exposition import choose_encoder

from api_gateway.cluster_link import ClusterLink


@get(
    "/metrics",
    summary="Prometheus metrics of the gateway (text exposition format); no API key, like /healthz",
    media_type=CONTENT_TYPE_LATEST,
)
async def metrics(request: Request[Any, Any, Any], cluster_link: NamedDependency[ClusterLink]) -> Response[bytes]:
    encode, content_type = choose_encoder(request.headers.get("accept", ""))
    return Response(encode(cluster_link.metrics.registry), media_type=content_type)
