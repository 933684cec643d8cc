"""``nrt up``: the whole stack on this machine, in the foreground, until Ctrl-C or SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import click
import httpx

from nrt.bus.connection import connect
from nrt.bus.jetstream import ensure_events_stream
from nrt.infra import nats_server, postgres_server
from nrt.manifest import Manifest, ManifestError, load_manifest
from nrt.manifest_sources import footprint_of
from nrt.stack import endpoints
from nrt.stack.bus import stack_bus
from nrt.stack.supervisor import Supervisor
from nrt.store import upgrade

CATALOGUE = "catalogue://"
SERVICES = ("cluster_state", "specialist_worker", "router_svc", "api_gateway")


def default_manifest() -> Path:
    return Path(__file__).resolve().parents[3] / "manifests" / "customer-support.yaml"


def _say(message: str) -> None:
    click.echo(f"nrt up: {message}", err=True)


def _prepare_models(manifest: Manifest) -> None:
    names = sorted({m.source.removeprefix(CATALOGUE) for m in manifest.models if m.source.startswith(CATALOGUE)})
    for name in names:
        _say(f"preparing catalogue model {name} (cached after the first time)")
        done = subprocess.run([sys.executable, "-m", "nrt.cli.main", "models", "prepare", name], check=False)
        if done.returncode != 0:
            raise click.ClickException(f"could not prepare catalogue model {name}; see the output above")


def database_server(data_dir: Path) -> contextlib.AbstractContextManager[str]:
    """NRT_DATABASE_URL exactly as given, else an embedded PostgreSQL in ``data_dir`` with a database ``nrt``."""
    return postgres_server(data_dir / "postgres", env_var="NRT_DATABASE_URL", database="nrt", use_docker=False)


async def _wait_ready(url: str, supervisor: Supervisor, within: float) -> None:
    deadline = time.monotonic() + within
    last = ""
    async with httpx.AsyncClient(timeout=2) as client:
        while time.monotonic() < deadline:
            try:
                response = await client.get(f"{url}/readyz")
                if response.status_code == 200:
                    return
                detail = response.text[:200]
            except httpx.TransportError as exc:
                detail = type(exc).__name__
            if detail != last:
                _say(f"waiting for readiness: {detail}")
                last = detail
            await asyncio.sleep(0.5)
    raise click.ClickException(f"the stack was not ready within {within:g}s (last: {last}); see the logs")


async def _run(manifest_path: Path, host: str, port: int, data_dir: Path, ready_within: float) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    with contextlib.ExitStack() as servers:
        bus = stack_bus(data_dir)  # the seeds and server config in data_dir/bus (None: NRT_NATS_URL's server)
        nats_url = servers.enter_context(
            nats_server(
                data_dir / "nats", env_var="NRT_NATS_URL", use_docker=False, config_file=bus.config if bus else None
            )
        )
        database_url = servers.enter_context(database_server(data_dir))
        _say(f"NATS at {nats_url}; PostgreSQL ready")
        await asyncio.to_thread(upgrade, database_url)
        nc = await connect(nats_url, name="nrt-up", credentials=bus.credentials("nrt") if bus else None)
        await ensure_events_stream(nc.jetstream())
        await nc.close()
        gateway_url = f"http://{host}:{port}"
        env = {
            "NRT_NATS_URL": nats_url,
            "NRT_DATABASE_URL": database_url,
            "NRT_MANIFEST": str(manifest_path),
            "NRT_GATEWAY_HOST": host,
            "NRT_GATEWAY_PORT": str(port),
        }
        supervisor = Supervisor(_say, log_dir=str(data_dir / "logs"))
        try:
            for service in SERVICES:
                await supervisor.start(
                    supervisor.python_module(service, service, env | (bus.env(service) if bus else {}))
                )
            _say(f"services started ({', '.join(SERVICES)}); logs in {data_dir / 'logs'}")
            waiting = asyncio.create_task(_wait_ready(gateway_url, supervisor, ready_within))
            stopped = asyncio.create_task(stop.wait())
            done, _ = await asyncio.wait({waiting, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if waiting in done:
                waiting.result()
                endpoints.write(
                    endpoints.Endpoints(
                        nats_url=nats_url, database_url=database_url, gateway_url=gateway_url, pid=os.getpid()
                    ),
                    data_dir,
                )
                click.echo(f"\nNRT is up: {gateway_url}  (Ctrl-C to stop)\n")
                click.echo(
                    f"curl -N {gateway_url}/v1/chat/completions -H 'Content-Type: application/json' \\\n"
                    '  -d \'{"model": "router", "stream": true, '
                    '"messages": [{"role": "user", "content": "I was charged twice this month"}]}\'\n'
                )
                await stopped
            else:
                waiting.cancel()
        finally:
            _say("stopping")
            await supervisor.stop()
            endpoints.remove(data_dir)
    _say("stopped")


@click.command()
@click.option("--manifest", "manifest_path", type=click.Path(path_type=Path), default=None, help="manifest to run")
@click.option("--host", default="127.0.0.1", show_default=True, help="gateway address")
@click.option("--port", default=8080, show_default=True, help="gateway port")
@click.option("--data-dir", type=click.Path(path_type=Path), default=None, help="stack data (default NRT_HOME/stack)")
@click.option("--ready-timeout", default=900.0, show_default=True, help="seconds to wait for readiness")
def up(manifest_path: Path | None, host: str, port: int, data_dir: Path | None, ready_timeout: float) -> None:
    """Run the whole stack here: embedded NATS and PostgreSQL unless NRT_NATS_URL / NRT_DATABASE_URL are set."""
    path = manifest_path or default_manifest()
    try:
        manifest = load_manifest(path, footprint_of)
    except ManifestError as exc:
        raise click.ClickException(str(exc)) from exc
    _prepare_models(manifest)
    directory = data_dir or endpoints.stack_dir()
    directory.mkdir(parents=True, exist_ok=True)
    asyncio.run(_run(path.resolve(), host, port, directory, ready_timeout))
