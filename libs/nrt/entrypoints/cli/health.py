"""``nrt health SERVICE``: exit 0 when the service answers its health subject (container health checks)."""

from __future__ import annotations

import asyncio
import sys

import click

from nrt.adapters.bus import rpc
from nrt.adapters.bus.connection import connect
from nrt.core.protocol import Health, HealthQuery
from nrt.entrypoints.cli.settings import cli_settings
from nrt.entrypoints.service import health_subject
from nrt.entrypoints.stack import endpoints
from nrt.entrypoints.stack.bus import cli_credentials


async def _ask(url: str, service: str, within: float) -> Health:
    nc = await connect(
        url, name="nrt-health", connect_timeout=within, credentials=cli_credentials(url, endpoints.stack_dir())
    )
    try:
        return await rpc.request(nc, health_subject(service), HealthQuery(), Health, timeout=within)
    finally:
        await nc.close()


@click.command()
@click.argument("service")
@click.option("--nats-url", default=None, help="NATS URL (default: NRT_NATS_URL, else nats://127.0.0.1:4222)")
@click.option("--timeout", "within", default=3.0, show_default=True)
def health(service: str, nats_url: str | None, within: float) -> None:
    """Ask SERVICE (router_svc, specialist_worker, cluster_state) whether it is up."""
    url = nats_url or cli_settings().nats_url
    try:
        answer = asyncio.run(_ask(url, service, within))
    except Exception as exc:
        click.echo(f"{service}: not healthy: {exc}", err=True)
        sys.exit(1)
    counts = "".join(f", {name} {count}" for name, count in sorted(answer.counters.items()))
    click.echo(f"{service}: {answer.status} ({answer.instance}, up {answer.uptime_s:.0f}s{counts})")
