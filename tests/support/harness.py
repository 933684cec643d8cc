"""The whole request path in one process, on real NATS with real tiny ONNX models.

A specialist worker (the real one) hosts the specialists, router_svc hosts the entry model
and routes, the gateway serves HTTP through uvicorn on a free port; each has its own NATS
connection, as separate processes would. Running them in-process lets one in-memory span
exporter see every span of a request. Nothing here is a stand-in: it is the services' own code.

By default the harness applies the manifest (it publishes ``ManifestApplied``) and loads
the models itself: the entry model on router_svc (``ROUTER_HOST``), the others on the worker;
given a database, cluster_state runs too and does both, as in a deployment: it bootstraps
the manifest, places the models on the heartbeating workers and serves
``nrt.manifest.apply`` (``PUT /v1/manifest``).

Its API keys are recorded the way cluster_state records the keys given at start
(``nrt.core.api_keys.bootstrap_event``): by the harness without a database, by cluster_state with one.
``Stack.client()`` and ``Stack.http()`` send the infer key ``API_KEY``; ``ADMIN_KEY`` is the admin key.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import uvicorn
from litestar import Litestar
from nats.aio.client import Client
from nats.js.errors import NotFoundError
from openai import AsyncOpenAI

from api_gateway.admission import AdmissionGate
from api_gateway.app import create_app
from api_gateway.settings import GatewaySettings
from cluster_state.service import ClusterStateService
from nrt.adapters.bus import subjects
from nrt.adapters.bus.broker import start_broker
from nrt.adapters.bus.connection import connect
from nrt.adapters.bus.credentials import BusCredentials
from nrt.adapters.bus.jetstream import EventPublisher, ensure_events_stream
from nrt.adapters.inference.batching import DEFAULT_PREFIX_CACHE_BYTES
from nrt.adapters.infra import free_port
from nrt.adapters.settings import Settings, models_dir
from nrt.core.api_keys import bootstrap_event
from nrt.core.events import AnyEvent, ManifestApplied, decode
from nrt.core.manifest import Manifest, parse_manifest
from nrt.core.policies import Tuning
from nrt.core.vocabulary import KeyScope
from nrt.entrypoints.service import ServiceContext, serve_health
from nrt.hosting.resources import detect
from nrt.hosting.worker import Worker
from paths import FIXTURES
from router_svc.app import router_host
from router_svc.app import run as run_router
from router_svc.settings import RouterSettings
from worker_calls import control

API_KEY = "test-api-key"  # infer scope: what Stack.client() and Stack.http() send
ADMIN_KEY = "test-admin-key"
KEYS = {KeyScope.INFER: API_KEY, KeyScope.ADMIN: ADMIN_KEY}
ROUTER_HOST = "r-gateway"  # router_svc's worker id: the entry model's worker
CLUSTER_STATE_TUNING = Tuning(heartbeat_s=0.5, settle_s=5.0, retry_s=2.0)  # the worker beats every 0.5 s


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # in-process: leave the test runner's signal handling alone


@dataclass
class Stack:
    nats_url: str
    nc: Client  # the test's own connection
    base_url: str
    manifest: Manifest
    worker: Worker
    worker_nc: Client
    settings: GatewaySettings
    gateway: _Server
    router: ServiceContext
    router_host: Worker  # router_svc's own worker: it hosts the entry model
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    cluster_state: ClusterStateService | None = None  # with a database: applies the manifest, places, swaps

    async def stop_router(self) -> None:
        """router_svc goes away: it stops taking requests and answering health checks."""
        self.router.stopping.set()
        await self.tasks[0]
        await self.router.broker.stop()

    def gate(self) -> AdmissionGate:
        """The gateway's admission gate: closed while it has seen a swap's ``DrainStarted`` and not its cut-over."""
        app = self.gateway.config.app
        assert isinstance(app, Litestar)
        return app.state.cluster_link.require().gate  # type: ignore[no-any-return]

    def client(self, api_key: str = API_KEY, **kwargs: object) -> AsyncOpenAI:
        return AsyncOpenAI(base_url=f"{self.base_url}/v1", api_key=api_key, max_retries=0, **kwargs)  # type: ignore[arg-type]

    def http(self, api_key: str | None = API_KEY) -> httpx.AsyncClient:
        """An HTTP client of the gateway that sends ``api_key`` (None: no key)."""
        headers = {"Authorization": f"Bearer {api_key}"} if api_key is not None else {}
        return httpx.AsyncClient(base_url=self.base_url, timeout=30, headers=headers)

    async def events(self, request_id: str | None = None, within: float = 5.0, until: int = 0) -> list[AnyEvent]:
        """Events in the stream (those of ``request_id`` only, if given); waits until ``until`` of them exist."""
        js = self.nc.jetstream()
        deadline = time.monotonic() + within
        while True:
            info = await js.stream_info(subjects.EVENTS_STREAM)
            out = []
            for seq in range(1, info.state.messages + 1):
                msg = await js.get_msg(subjects.EVENTS_STREAM, seq)
                assert msg.data is not None
                event = decode(msg.data)
                if request_id is None or getattr(event, "request_id", None) == request_id:
                    out.append(event)
            if len(out) >= until or time.monotonic() > deadline:
                return out
            await asyncio.sleep(0.05)


def fixture_manifest(name: str) -> str:
    """A test manifest; ``@TINY_BERT@`` becomes the tiny encoder's directory (a local ONNX export,
    not a catalogue entry) under this test's NRT_HOME."""
    text = (FIXTURES / name).read_text()
    return text.replace("@TINY_BERT@", str(models_dir() / "tiny-bert"))


async def fresh_events_stream(nc: Client) -> None:
    js = nc.jetstream()
    with contextlib.suppress(NotFoundError):
        await js.delete_stream(subjects.EVENTS_STREAM)
    await ensure_events_stream(js)


async def record_keys(nc: Client, keys: dict[KeyScope, str]) -> None:
    """Record ``keys`` as cluster_state records the keys given at start."""
    publisher = EventPublisher(nc)
    for scope, key in keys.items():
        await publisher.publish(bootstrap_event(key, scope, name=f"bootstrap {scope}"))


async def apply_manifest(nc: Client, text: str, version: int = 1) -> Manifest:
    manifest = parse_manifest(text, f"manifest v{version}")
    await EventPublisher(nc).publish(
        ManifestApplied(version=version, cluster=manifest.cluster, digest=manifest.digest, text=text)
    )
    return manifest


async def serve_router(
    nats_url: str, settings: RouterSettings, credentials: BusCredentials | None = None
) -> tuple[asyncio.Task[None], ServiceContext, Worker]:
    """router_svc's body and its health subject, as ``run_service`` runs them, and its router host
    (the entry model's worker), started: it has joined and obeys control commands."""
    broker = await start_broker(nats_url, "router_svc", credentials=credentials)
    ctx = ServiceContext(name="router_svc", settings=Settings(nats_url=nats_url, home=Path(".")), broker=broker)
    await serve_health(ctx)
    host = router_host(ctx, settings)
    task = asyncio.create_task(run_router(ctx, settings, host))
    waiting = asyncio.create_task(host.started.wait())
    await asyncio.wait({task, waiting}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()
    if task.done():
        task.result()  # router_svc crashed: say why
    assert host.started.is_set(), "router_svc's router host did not start"
    return task, ctx, host


async def wait_ready(base_url: str, within: float = 20.0, partial: bool = False) -> None:
    """Until /readyz is green; ``partial``: until every check but the models one is (some are placed nowhere)."""
    deadline = time.monotonic() + within
    async with httpx.AsyncClient(base_url=base_url, timeout=2) as http:
        while True:
            try:
                ready = await http.get("/readyz")
                checks = ready.json()["checks"]
                if ready.status_code == 200 or (partial and all(v == "ok" for k, v in checks.items() if k != "models")):
                    return
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the gateway did not become ready"
            await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def extra_gateway(settings: GatewaySettings, within: float = 20.0) -> AsyncIterator[tuple[str, Litestar]]:
    """One more api_gateway, on a free port, on the bus ``settings`` name (a second gateway of a stack):
    its base URL and its app, once ``/readyz`` is green (``partial``: every check but the models one)."""
    app = create_app(settings)
    port = free_port()
    server = _Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    base_url = f"http://127.0.0.1:{port}"
    try:
        await wait_ready(base_url, within=within, partial=True)
        yield base_url, app
    finally:
        server.should_exit = True
        await task


@contextlib.asynccontextmanager
async def start_stack(
    nats_url: str,
    manifest_file: str,
    loads: dict[str, str] | None = None,
    settings: GatewaySettings | None = None,
    router_settings: RouterSettings | None = None,
    edit: tuple[str, str] | list[tuple[str, str]] | None = None,
    database_url: str | None = None,
    keys: Path | None = None,
    partial: bool = False,
    prefix_cache_bytes: int = DEFAULT_PREFIX_CACHE_BYTES,
) -> AsyncIterator[Stack]:
    """Apply ``manifest_file`` (version 1), start router_svc, load the models at the declared tiers
    (or ``loads``: model id -> tier): the entry model on router_svc, the others on one worker;
    start the gateway.

    With ``database_url`` (an empty, migrated database), cluster_state applies and places
    instead: it records the events there, bootstraps the manifest as version 1 and places
    its models on the worker and router_svc, which send heartbeats.

    With ``keys`` (a directory of ``nrt.adapters.bus.auth`` credentials, for a server that checks them), each
    service connects as itself and the test's own connection as cluster_state (it applies manifests
    and sends control commands).

    ``partial`` (implied by ``loads``): the stack is handed over once every readiness check but the
    models one is green (some models are never served).

    ``prefix_cache_bytes``: the worker's shared-prefix KV per model (``0``: none, every prefill cold)."""
    assert database_url is None or loads is None, "cluster_state places the models: no loads with a database"

    def as_identity(identity: str) -> BusCredentials | None:
        return BusCredentials.of(keys, identity) if keys is not None else None

    nc = await connect(nats_url, name="nrt-test", credentials=as_identity("cluster_state"))
    await fresh_events_stream(nc)
    text = fixture_manifest(manifest_file)
    for old, new in [edit] if isinstance(edit, tuple) else edit or []:  # (old, new): a variant of the fixture
        assert old in text
        text = text.replace(old, new)
    worker_broker = await start_broker(nats_url, "specialist_worker", credentials=as_identity("specialist_worker"))
    worker_nc = worker_broker.connection
    worker = Worker(
        worker_broker,
        detect(),
        worker_id="w-gateway",
        max_batch_size=8,
        heartbeat_s=0.5,
        prefix_cache_bytes=prefix_cache_bytes,
    )
    router_settings = router_settings or RouterSettings(
        classify_timeout=10, manifest_wait=2, router_worker_id=ROUTER_HOST, router_max_batch=8, heartbeat_s=0.5
    )
    beating = asyncio.Event()
    heartbeats: asyncio.Task[None] | None = None
    cluster_state: ClusterStateService | None = None
    if database_url is None:
        await record_keys(nc, KEYS)
        manifest = await apply_manifest(nc, text)
        await worker.start()
        router_task, router_ctx, router_host = await serve_router(nats_url, router_settings, as_identity("router_svc"))
        tiers = loads if loads is not None else {spec.id: spec.tier.value for spec in manifest.models}
        for model_id, tier in tiers.items():
            host = router_host if model_id == manifest.routing.entry else worker
            await control(
                nc,
                host.worker_id,
                action="load",
                model_id=model_id,
                source=manifest.model(model_id).source,
                tier=tier,
            )
    else:
        manifest = parse_manifest(text, "manifest v1")
        await worker.start()
        heartbeats = asyncio.create_task(worker.run_heartbeats(beating))
        state_broker = await start_broker(nats_url, "cluster_state", credentials=as_identity("cluster_state"))
        cluster_state = ClusterStateService(
            state_broker, database_url, manifest_text=text, tuning=CLUSTER_STATE_TUNING, tick_s=0.2, keys=KEYS
        )
        await asyncio.wait_for(cluster_state.start(), 30)
        router_task, router_ctx, router_host = await serve_router(nats_url, router_settings, as_identity("router_svc"))
    settings = settings or GatewaySettings(
        nats_url=nats_url,
        route_timeout=10,
        idle_timeout=10,
        request_timeout=30,
        nats_nkey_seed_file=keys / "api_gateway.nk" if keys is not None else None,
    )
    port = free_port()
    server = _Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning"))
    gateway_task = asyncio.create_task(server.serve())
    base_url = f"http://127.0.0.1:{port}"
    stack = Stack(
        nats_url,
        nc,
        base_url,
        manifest,
        worker,
        worker_nc,
        settings,
        server,
        router_ctx,
        router_host,
        [router_task, gateway_task],
        cluster_state,
    )
    try:
        await wait_ready(base_url, within=60 if cluster_state is not None else 20, partial=partial or loads is not None)
        await worker.manifest.wait_for(lambda s: s.manifest_version >= 1, within=10)
        yield stack
    finally:
        server.should_exit = True
        await gateway_task
        router_ctx.stopping.set()
        await router_task
        await router_ctx.broker.stop()
        if cluster_state is not None:
            await cluster_state.stop()
            await cluster_state.broker.stop()
        if heartbeats is not None:
            beating.set()
            await heartbeats
        if worker_nc.is_connected:
            await worker.stop()
            await worker_broker.stop()
        else:  # a test cut the worker off the bus: free its models all the same
            await asyncio.to_thread(worker.host.close)
        await nc.drain()
