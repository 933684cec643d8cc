"""``nrt up``: the whole stack on this machine, in the foreground, until Ctrl-C or SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import httpx

from nrt.adapters.bus.connection import connect
from nrt.adapters.bus.jetstream import StreamLimits, ensure_events_stream
from nrt.adapters.bus.replication import replicas_for
from nrt.adapters.infra import EmbeddedNats, EmbeddedNatsCluster, EmbeddedPostgres, InfraError, free_port, pgurl
from nrt.adapters.infra._process import dies_with_parent
from nrt.adapters.infra.pgroles import ensure_owner_role
from nrt.adapters.manifest_sources import footprint_of
from nrt.adapters.store import upgrade
from nrt.core.api_keys import MIN_KEY_LENGTH, weak
from nrt.core.manifest import Manifest, ManifestError, load_manifest
from nrt.entrypoints.cli.settings import cli_settings
from nrt.entrypoints.stack import backing, endpoints, keys_file
from nrt.entrypoints.stack.backing import Backing
from nrt.entrypoints.stack.bus import StackBus, stack_bus
from nrt.entrypoints.stack.given import GivenManifest, compare_with_log, wait_served
from nrt.entrypoints.stack.preflight import StackInUseError, claimed
from nrt.entrypoints.stack.secrets import secret
from nrt.entrypoints.stack.supervisor import Supervisor

CATALOGUE = "catalogue://"
SERVICES = ("cluster_state", "specialist_worker", "router_svc", "api_gateway")
DATABASE = "nrt"
DATABASE_ROLE = "nrt"  # what the services connect as: owns the database, no superuser
STREAM_WAIT_S = 30.0  # for JetStream to answer (a NATS cluster electing its leader)


def default_manifest() -> Path:
    return Path(__file__).resolve().parents[4] / "manifests" / "customer-support.yaml"


def _say(message: str) -> None:
    click.echo(f"nrt up: {message}", err=True)


def _prepare_models(manifest: Manifest) -> None:
    names = sorted({m.source.removeprefix(CATALOGUE) for m in manifest.models if m.source.startswith(CATALOGUE)})
    for name in names:
        _say(f"preparing catalogue model {name} (cached after the first time)")
        done = subprocess.run(
            [sys.executable, "-m", "nrt.entrypoints.cli.main", "models", "prepare", name],
            check=False,
            preexec_fn=dies_with_parent(signal.SIGTERM),  # a conversion of minutes stops with a killed nrt up
        )
        if done.returncode != 0:
            raise click.ClickException(f"could not prepare catalogue model {name}; see the output above")


def embedded_nats(data_dir: Path, bus: StackBus | None = None) -> EmbeddedNats:
    """The stack's own NATS server (not started): the one place its options are chosen; with ``bus``,
    its users, their nkeys and permissions (``nrt.adapters.bus.auth``): no anonymous client."""
    return EmbeddedNats(data_dir / "nats", config_file=bus.config if bus is not None else None)


def embedded_postgres(data_dir: Path) -> EmbeddedPostgres:
    """The stack's own PostgreSQL (not started): its superuser's password is generated once, kept in
    ``data_dir/secrets``, and every connection must give one."""
    return EmbeddedPostgres(data_dir / "postgres", password=secret(data_dir, "postgres-superuser"))


def _from_env(name: str) -> str | None:
    return os.environ.get(name, "").strip() or None


def embedded_nats_cluster(data_dir: Path, size: int, bus: StackBus | None = None) -> EmbeddedNatsCluster:
    """The stack's own NATS cluster of ``size`` servers (not started), in ``data_dir/nats-cluster``, each server
    with the same users as ``embedded_nats``."""
    return EmbeddedNatsCluster(data_dir / "nats-cluster", size=size, config_file=bus.config if bus else None)


@dataclass(frozen=True, slots=True)
class NatsBacking:
    """The stack's NATS: the URL the services connect with (a cluster's servers separated by commas), and the
    servers this stack runs and watches (none when NRT_NATS_URL names them)."""

    url: str
    servers: tuple[Backing, ...]


@contextlib.contextmanager
def nats_backing(data_dir: Path, bus: StackBus | None = None, cluster: int | None = None) -> Iterator[NatsBacking]:
    """NRT_NATS_URL as given, else the embedded NATS in ``data_dir`` (with ``cluster``, a cluster of that many
    servers), watched. ``cluster`` with NRT_NATS_URL set is refused before (``up``)."""
    url = _from_env("NRT_NATS_URL")
    if url is not None:
        yield NatsBacking(url, ())
        return
    if cluster is not None:
        with embedded_nats_cluster(data_dir, cluster, bus) as servers:
            nodes = (Backing(f"NATS server {n.server_name}", n.address, n) for n in servers.nodes)
            yield NatsBacking(servers.url, tuple(nodes))
        return
    with backing.running("NATS", embedded_nats(data_dir, bus), lambda s: s.address) as nats:
        yield NatsBacking(nats.url, (nats,))


@contextlib.contextmanager
def database_backing(data_dir: Path) -> Iterator[Backing]:
    """NRT_DATABASE_URL exactly as given, else the embedded PostgreSQL in ``data_dir`` with a database
    ``nrt`` owned by the role ``nrt`` (no superuser), whose URL the services get."""
    url = _from_env("NRT_DATABASE_URL")
    if url is not None:
        yield Backing("PostgreSQL", pgurl.to_sqlalchemy(url))
        return
    server = embedded_postgres(data_dir)
    with backing.running("PostgreSQL", server, lambda s: s.address) as pg:
        role_url = ensure_owner_role(server.url, DATABASE, DATABASE_ROLE, secret(data_dir, "postgres-nrt"))
        yield Backing(pg.name, role_url, pg.server)


class ModelsFailed(click.ClickException):
    """The stack cannot become ready: a model it needs could not be loaded on any worker that could hold it."""

    def __init__(self, failed: list[dict[str, Any]]) -> None:
        lines = [
            f"  {f.get('model')} (on {f.get('worker_id')}): {f.get('error') or 'no reason recorded'}" for f in failed
        ]
        super().__init__(
            "giving up: the stack cannot be ready, these models could not be loaded on any worker that could hold "
            "them:\n" + "\n".join(lines) + "\nfix their source in the manifest (`nrt manifest check` it) and run "
            "`nrt up` again"
        )


async def readiness_problem(client: httpx.AsyncClient, url: str, instance: str) -> str | None:
    """None when the gateway at ``url`` is ours (``instance``) and ready, else what is missing; raises
    ``ModelsFailed`` when it says a model it needs failed to load everywhere (waiting would not help)."""
    try:
        response = await client.get(f"{url}/readyz")
    except httpx.TransportError as exc:
        return type(exc).__name__
    try:
        body = response.json()
    except ValueError:
        body = {}
    answered = body.get("instance") if isinstance(body, dict) else None
    if answered != instance:
        return f"{url} is not this stack's gateway (instance {answered!r}, expected {instance!r})"
    if response.status_code == 200:
        return None
    given_up = [f for f in body.get("failed", []) if isinstance(f, dict) and f.get("required")]
    if given_up:
        raise ModelsFailed(given_up)
    return response.text[:200]


def _api_keys(data_dir: Path) -> keys_file.StackKeys:
    """The stack's API keys (NRT_API_KEY / NRT_ADMIN_KEY, else its keys file, else new ones), said once made."""
    keys, made = keys_file.ensure(data_dir, os.environ)
    shown = {"infer": ("NRT_API_KEY", keys.api_key), "admin": ("NRT_ADMIN_KEY", keys.admin_key)}
    for scope, (variable, key) in shown.items():
        if scope in made:
            _say(f"created the {scope} API key ({variable}): {key}")
        elif weak(key):
            _say(f"WARNING: {variable} is shorter than {MIN_KEY_LENGTH} characters: easy to guess")
    _say(f"API keys in {data_dir / keys_file.KEYS_FILE} (mode 0600); `nrt chat`, `nrt status`, `nrt keys` use them")
    if os.environ.get("NRT_AUTH", "").lower() in ("off", "0", "false", "no"):
        _say("WARNING: NRT_AUTH=off: the gateway checks no API key; for local experiments only")
    return keys


async def _wait_ready(url: str, instance: str, within: float) -> None:
    deadline = time.monotonic() + within
    last = ""
    async with httpx.AsyncClient(timeout=2) as client:
        while time.monotonic() < deadline:
            detail = await readiness_problem(client, url, instance)
            if detail is None:
                return
            if detail != last:
                _say(f"waiting for readiness: {detail}")
                last = detail
            await asyncio.sleep(0.5)
    raise click.ClickException(f"the stack was not ready within {within:g}s (last: {last}); see the logs")


def _service_env(
    nats: NatsBacking, database: Backing, manifest_path: Path, host: str, port: int, instance: str
) -> dict[str, str]:
    return {
        "NRT_NATS_URL": nats.url,
        "NRT_DATABASE_URL": database.url,
        "NRT_MANIFEST": str(manifest_path),
        "NRT_GATEWAY_HOST": host,
        "NRT_GATEWAY_PORT": str(port),
        "NRT_GATEWAY_INSTANCE": instance,
        "NRT_METRICS_HOST": host,
    }


def metrics_ports() -> dict[str, int]:
    """A free metrics port for each service but the gateway (it serves ``/metrics`` on its own port)."""
    return {service: free_port() for service in SERVICES if service != "api_gateway"}


def metrics_urls(host: str, gateway_url: str, ports: dict[str, int]) -> dict[str, str]:
    """Each service's metrics URL, as ``endpoints.json`` lists them."""
    urls = {service: f"http://{host}:{port}/metrics" for service, port in ports.items()}
    return urls | {"api_gateway": f"{gateway_url}/metrics"}


async def _prepare_stream(nats_url: str, bus: StackBus | None) -> None:
    """The events stream, with the retention the environment gives (NRT_EVENTS_STREAM_MAX_MSGS / _MAX_AGE_S) and
    its copies (NRT_NATS_REPLICAS, else by the NATS cluster's size)."""
    settings = cli_settings()
    nc = await connect(nats_url, name="nrt-up", credentials=bus.credentials("nrt") if bus else None)
    try:
        replicas = replicas_for(nc, settings.nats_replicas)
        await ensure_events_stream(
            nc.jetstream(), limits=StreamLimits.of(settings), replicas=replicas, update=True, wait_s=STREAM_WAIT_S
        )
    finally:
        await nc.close()


def _announce(gateway_url: str, api_key: str) -> None:
    click.echo(f"\nNRT is up: {gateway_url}  (Ctrl-C to stop)\n")
    click.echo(
        f"curl -N {gateway_url}/v1/chat/completions -H 'Content-Type: application/json' \\\n"
        f"  -H 'Authorization: Bearer {api_key}' \\\n"
        '  -d \'{"model": "router", "stream": true, '
        '"messages": [{"role": "user", "content": "I was charged twice this month"}]}\'\n'
    )


async def _serve(
    supervisor: Supervisor,
    env: dict[str, str],
    bus: StackBus | None,
    gateway_url: str,
    ready_within: float,
    stop: asyncio.Event,
    ports: dict[str, int],
) -> bool:
    """Start the services (each with its own bus identity and metrics port), wait for our gateway to be
    ready; False when stopped before that."""
    for service in SERVICES:
        own = env | (bus.env(service) if bus is not None else {})
        if service in ports:
            own = own | {"NRT_METRICS_PORT": str(ports[service])}
        await supervisor.start(supervisor.python_module(service, service, own))
    waiting = asyncio.create_task(_wait_ready(gateway_url, env["NRT_GATEWAY_INSTANCE"], ready_within))
    stopped = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait({waiting, stopped}, return_when=asyncio.FIRST_COMPLETED)
    if waiting not in done:
        waiting.cancel()
        return False
    stopped.cancel()
    waiting.result()
    return True


async def _serve_given(
    given: GivenManifest, gateway_url: str, env: dict[str, str], api_key: str, within: float, stop: asyncio.Event
) -> bool:
    """Once ready, wait for the gateway to serve the manifest given and its models, and say what changed;
    False when stopped before that."""

    async def served() -> None:
        try:
            version = await wait_served(gateway_url, api_key, given.manifest.digest, within, _say)
        except TimeoutError as exc:
            raise click.ClickException(f"{exc}: see cluster_state's log in the data directory's logs/") from None
        await _wait_ready(gateway_url, env["NRT_GATEWAY_INSTANCE"], within)
        what = given.changes.summary() if given.changes is not None else "a new manifest"
        _say(f"manifest v{given.in_force} -> v{version} ({given.path}): {what}")

    waiting, stopped = asyncio.create_task(served()), asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait({waiting, stopped}, return_when=asyncio.FIRST_COMPLETED)
    for task in (waiting, stopped):
        task.cancel()
    if waiting in done:
        waiting.result()
        return True
    return False


async def _run(
    manifest_path: Path, host: str, port: int, data_dir: Path, ready_within: float, nats_cluster: int | None = None
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    with contextlib.ExitStack() as servers:
        bus = stack_bus(data_dir)  # the seeds and server config in data_dir/bus (None: NRT_NATS_URL's server)
        nats = servers.enter_context(nats_backing(data_dir, bus, nats_cluster))
        database = servers.enter_context(database_backing(data_dir))
        _say(f"NATS at {nats.url}; PostgreSQL ready")
        await asyncio.to_thread(upgrade, database.url)
        given = await compare_with_log(database.url, manifest_path, load_manifest(manifest_path, footprint_of))
        _say(given.announcement())
        await _prepare_stream(nats.url, bus)
        watching = asyncio.create_task(backing.watch([*nats.servers, database], _say))
        gateway_url = f"http://{host}:{port}"
        instance = uuid.uuid4().hex
        env = _service_env(nats, database, manifest_path, host, port, instance)
        keys = _api_keys(data_dir)
        env.update(keys.env())
        supervisor = Supervisor(_say, log_dir=str(data_dir / "logs"))
        try:
            _say(f"starting {', '.join(SERVICES)}; logs in {data_dir / 'logs'}")
            ports = metrics_ports()
            serving = await _serve(supervisor, env, bus, gateway_url, ready_within, stop, ports)
            if serving and given.differs:
                serving = await _serve_given(given, gateway_url, env, keys.api_key, ready_within, stop)
            if serving:
                found = endpoints.Endpoints(
                    nats_url=nats.url,
                    database_url=database.url,
                    gateway_url=gateway_url,
                    pid=os.getpid(),
                    metrics=metrics_urls(host, gateway_url, ports),
                )
                endpoints.write(found, data_dir)
                _announce(gateway_url, keys.api_key)
                await stop.wait()
        finally:
            _say("stopping")
            await supervisor.stop()
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching
            endpoints.remove(data_dir)
    _say("stopped")


@click.command()
@click.option("--manifest", "manifest_path", type=click.Path(path_type=Path), default=None, help="manifest to run")
@click.option("--host", default="127.0.0.1", show_default=True, help="gateway address")
@click.option("--port", default=8080, show_default=True, help="gateway port")
@click.option("--data-dir", type=click.Path(path_type=Path), default=None, help="stack data (default NRT_HOME/stack)")
@click.option("--ready-timeout", default=900.0, show_default=True, help="seconds to wait for readiness")
@click.option(
    "--nats-cluster",
    type=click.IntRange(min=3),
    default=None,
    help="run the embedded NATS as a cluster of this many servers (3 or more; the events stream in 3 copies)",
)
def up(
    manifest_path: Path | None,
    host: str,
    port: int,
    data_dir: Path | None,
    ready_timeout: float,
    nats_cluster: int | None,
) -> None:
    """Run the whole stack here: embedded NATS and PostgreSQL unless NRT_NATS_URL / NRT_DATABASE_URL are set."""
    given_nats = _from_env("NRT_NATS_URL")
    if nats_cluster is not None and given_nats is not None:
        raise click.UsageError(
            f"--nats-cluster starts a NATS cluster of this stack's own, but NRT_NATS_URL names servers "
            f"({given_nats}): unset NRT_NATS_URL, or leave out --nats-cluster"
        )
    path = manifest_path or default_manifest()
    try:
        manifest = load_manifest(path, footprint_of)
    except ManifestError as exc:
        raise click.ClickException(str(exc)) from exc
    directory = data_dir or endpoints.stack_dir()
    try:
        with claimed(directory, host, port):
            _prepare_models(manifest)
            asyncio.run(_run(path.resolve(), host, port, directory, ready_timeout, nats_cluster))
    except (StackInUseError, InfraError) as exc:  # what holds the directory or port, or why a server failed
        raise click.ClickException(str(exc)) from exc
