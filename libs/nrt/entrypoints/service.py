"""The imperative shell every service shares: logging, tracing, the FastStream broker, health, signals.

Each service is a FastStream application on one ``NatsBroker`` (``nrt.adapters.bus.broker``): the
shell starts it, answers ``nrt.health.<service>`` on it, and hands the body a context
with the broker and its NATS connection (for the raw hot path).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import uvloop
from faststream.nats import NatsBroker
from nats.aio.client import Client
from prometheus_client import CollectorRegistry

from nrt.adapters.bus import broker as bus
from nrt.adapters.bus.connection import credentials_of
from nrt.adapters.metrics import serve_metrics
from nrt.adapters.settings import LogLevel, Settings, SettingsError
from nrt.adapters.telemetry import setup_tracing
from nrt.core.protocol import Health, HealthQuery

log = logging.getLogger("nrt.entrypoints.service")

T = TypeVar("T")

DEFAULT_NATS_URL = "nats://127.0.0.1:4222"


def health_subject(service: str) -> str:
    return f"nrt.health.{service}"


@dataclass
class ServiceContext:
    name: str
    settings: Settings
    broker: NatsBroker
    instance: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    started: float = field(default_factory=time.monotonic)
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    counters: dict[str, Callable[[], int]] = field(default_factory=dict)  # named counts the health reply carries
    registry: CollectorRegistry = field(
        default_factory=CollectorRegistry
    )  # this service's metrics (nrt.adapters.metrics)

    @property
    def nc(self) -> Client:
        """The broker's NATS connection, for the raw hot path (``nrt.adapters.bus.rpc``) and JetStream."""
        return self.broker.connection


async def serve_health(ctx: ServiceContext) -> None:
    """Answer ``nrt.health.<service>`` with this instance's identity and uptime."""

    async def health(query: HealthQuery) -> Health:
        """Is this service instance alive: its name, instance id and uptime."""
        return Health(
            service=ctx.name,
            instance=ctx.instance,
            uptime_s=time.monotonic() - ctx.started,
            counters={name: count() for name, count in ctx.counters.items()},
        )

    await bus.serve(ctx.broker, health_subject(ctx.name), health, title=f"{ctx.name}: health")


ServiceBody = Callable[[ServiceContext], Coroutine[Any, Any, None]]


async def run_service(name: str, body: ServiceBody, settings: Settings | None = None) -> None:
    """Connect, answer health checks, run ``body`` until it returns or a signal arrives."""
    settings = settings or Settings.from_env()
    setup_tracing(name)
    broker = await bus.start_broker(settings.nats_url or DEFAULT_NATS_URL, name, credentials=credentials_of(settings))
    ctx = ServiceContext(name=name, settings=settings, broker=broker)
    await serve_health(ctx)
    metrics = serve_metrics(name, ctx.registry, settings.metrics_port, settings.metrics_host)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, ctx.stopping.set)
    log.info("%s ready (instance %s)", name, ctx.instance)
    task = asyncio.create_task(body(ctx))
    stop = asyncio.create_task(ctx.stopping.wait())
    try:
        done, _ = await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            task.result()  # surface a crash
    finally:
        for pending in (task, stop):
            pending.cancel()
        await asyncio.gather(task, stop, return_exceptions=True)
        await broker.stop()
        if metrics is not None:
            metrics.close()
        log.info("%s stopped", name)


def configure_logging(name: str, level: LogLevel) -> None:
    """Every service logs alike: at ``level`` (``NRT_LOG_LEVEL``), one line per record, named."""
    logging.basicConfig(
        level=level,
        format=f"%(asctime)s {name} %(levelname)s %(name)s: %(message)s",
    )


def run_loop(main: Coroutine[Any, Any, T], use_uvloop: bool = True) -> T:
    """Run ``main`` to completion on a new event loop: uvloop's (``NRT_UVLOOP``, on by default), else asyncio's."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop if use_uvloop else None) as runner:
        return runner.run(main)


def main(name: str, body: ServiceBody) -> None:
    """``python -m <service>``: run the service in the foreground; a bad setting exits 2 naming its variable."""
    try:
        settings = Settings.from_env()
        configure_logging(name, settings.log_level)
        run_loop(run_service(name, body, settings), settings.uvloop)
    except SettingsError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        sys.exit(2)


async def idle(ctx: ServiceContext) -> None:
    """A body that only serves health checks until stopped."""
    await ctx.stopping.wait()
