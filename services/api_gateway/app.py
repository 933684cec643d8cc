"""api_gateway: the HTTP face of the cluster (Litestar), OpenAI- and Anthropic-compatible.

- ``POST /v1/chat/completions`` (OpenAI) and ``POST /v1/messages`` (Anthropic): routed
  (``model`` = the entry model) or direct; JSON or SSE.
- ``POST /v1/completions`` (a generative model, raw prompt; JSON or SSE) and ``POST /v1/embeddings``
  (an encoder model), OpenAI's.
- ``GET /v1/models``, ``GET /v1/cluster``, ``GET /v1/manifest``, ``PUT /v1/manifest`` (admin).
- ``POST /v1/keys``, ``GET /v1/keys``, ``DELETE /v1/keys/{key_id}`` (admin): API keys.
- ``GET /v1/events/stream``: the event log, live, as server-sent events (the dashboard's feed).
- ``GET /ui``: the dashboard (static files; it asks for a key and calls the ``/v1`` routes).
- ``GET /health`` and ``GET /healthz`` (alive), ``GET /readyz`` (NATS, router_svc, a manifest).
- ``GET /metrics``: Prometheus metrics (``api_gateway.metrics``).

Every ``/v1`` route needs an API key (``api_gateway.auth``); health, metrics and the schemas are open.
- The OpenAPI schema at ``/schema/openapi.json`` (and ``/schema`` for people); the NATS message
  contract as AsyncAPI at ``/schema/asyncapi.json``.

Errors are in the OpenAI shape ``{"error": {"message", "type", "param", "code"}}``, except
``/v1/messages``'s, in Anthropic's ``{"type": "error", "error": {"type", "message", ...}}``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from litestar import Litestar
from litestar.di import Provide
from litestar.logging.config import LoggingConfig

from api_gateway.body import GatewayRequest
from api_gateway.cluster import cluster_state, get_manifest, list_models, manifest_options, put_manifest
from api_gateway.cluster_link import ClusterLink
from api_gateway.completions import chat_completions
from api_gateway.contract import asyncapi_document
from api_gateway.dashboard import ui_router
from api_gateway.embeddings import create_embeddings
from api_gateway.endpoint_docs import document_endpoint_requests
from api_gateway.errors import exception_handlers
from api_gateway.events_feed import event_stream
from api_gateway.health import health, healthz, readyz
from api_gateway.keys_endpoints import create_key, keys_options, list_keys, revoke_key
from api_gateway.messages import create_message
from api_gateway.metrics import metrics
from api_gateway.openapi_docs import document_chat_request, document_messages_request, openapi_config
from api_gateway.settings import GatewaySettings
from api_gateway.text_completions import create_completion

log = logging.getLogger("api_gateway")


def create_app(settings: GatewaySettings | None = None) -> Litestar:
    settings = settings or GatewaySettings.from_env()
    cluster_link = ClusterLink(settings)
    if not settings.auth:
        log.warning(
            "NRT_AUTH=off: AUTHENTICATION IS OFF. Anyone who reaches this gateway may chat, swap the manifest "
            "and manage keys. Use it for local experiments only."
        )

    @asynccontextmanager
    async def lifespan(_: Litestar) -> AsyncIterator[None]:
        await cluster_link.start()
        try:
            yield
        finally:
            await cluster_link.stop()

    def provide_cluster_link() -> ClusterLink:
        return cluster_link

    app = Litestar(
        route_handlers=[
            health,
            healthz,
            readyz,
            metrics,
            chat_completions,
            create_message,
            create_completion,
            create_embeddings,
            list_models,
            cluster_state,
            manifest_options,  # before the two handlers of its path
            get_manifest,
            put_manifest,
            keys_options,  # before the two handlers of its path
            create_key,
            list_keys,
            revoke_key,
            asyncapi_document,
            event_stream,
            ui_router(),
        ],
        dependencies={"cluster_link": Provide(provide_cluster_link, sync_to_thread=False)},
        exception_handlers=exception_handlers(settings.max_body_bytes),  # type: ignore[arg-type]
        request_max_body_size=settings.max_body_bytes,
        request_class=GatewayRequest,
        lifespan=[lifespan],
        openapi_config=openapi_config(),
        # the service shell configured logging (format, level) for every NRT service: keep it
        logging_config=LoggingConfig(configure_root_logger=False),
    )
    app.state.cluster_link = cluster_link
    document_chat_request(app.openapi_schema, settings.max_tokens_limit, settings.max_messages)
    document_messages_request(app.openapi_schema, settings.max_tokens_limit, settings.max_messages)
    document_endpoint_requests(app.openapi_schema, settings.max_tokens_limit)
    return app
