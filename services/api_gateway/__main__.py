"""``python -m api_gateway``: serve the HTTP API with uvicorn; SIGTERM/SIGINT stop it cleanly (exit 0)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Iterator

import uvicorn

from api_gateway.app import create_app
from api_gateway.cluster_link import ClusterLink
from api_gateway.settings import GatewaySettings
from nrt.adapters.metrics import serve_metrics
from nrt.adapters.settings import SettingsError
from nrt.adapters.telemetry import setup_tracing
from nrt.entrypoints.service import configure_logging, run_loop

SERVICE = "api_gateway"


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # signals are ours: a clean stop is a normal exit, not a re-raised signal


async def serve(settings: GatewaySettings) -> None:
    setup_tracing(SERVICE)  # OTLP export when OTEL_EXPORTER_OTLP_ENDPOINT is set, like every service
    app = create_app(settings)
    # GET /metrics on the HTTP port; also on a metrics port of its own when NRT_METRICS_PORT is set
    metrics = serve_metrics(
        SERVICE, app.state.cluster_link.metrics.registry, settings.metrics_port, settings.metrics_host
    )
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level.lower(),
        loop="uvloop" if settings.uvloop else "asyncio",  # what this process runs on (see run_loop)
    )
    server = _Server(config)
    cluster_link: ClusterLink = app.state.cluster_link

    def stop() -> None:
        cluster_link.closing.set()  # end the open event feeds, or uvicorn waits for their clients to leave
        server.should_exit = True

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop)
    try:
        await server.serve()
    finally:
        if metrics is not None:
            metrics.close()
    logging.getLogger("nrt.entrypoints.service").info("%s stopped", SERVICE)


if __name__ == "__main__":
    try:
        settings = GatewaySettings.from_env()
    except SettingsError as exc:
        print(f"{SERVICE}: {exc}", file=sys.stderr)
        sys.exit(2)
    configure_logging(SERVICE, settings.log_level)
    run_loop(serve(settings), settings.uvloop)
