"""Real servers for every test that needs one.

NATS and PostgreSQL come from NRT_TEST_NATS_URL / NRT_TEST_DATABASE_URL when set, else
from testcontainers when a Docker engine answers, else embedded servers on free ports
(nrt.adapters.infra). Each test gets its own database, cloned from a migrated template, and a
NATS connection whose event stream starts empty.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest
from faststream.nats import NatsBroker
from nats.aio.client import Client
from nats.js.errors import NotFoundError
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from nrt.adapters.bus import subjects
from nrt.adapters.bus.auth import CONFIG_FILE, ensure_credentials
from nrt.adapters.bus.broker import start_broker
from nrt.adapters.bus.connection import connect
from nrt.adapters.bus.jetstream import ensure_events_stream
from nrt.adapters.infra.embedded_nats import EmbeddedNats
from nrt.adapters.infra.pgurl import to_libpq, with_database
from nrt.adapters.store import EventStore, upgrade
from nrt.testing.servers import nats_server, postgres_server
from nrt.testing.stacks import link_tiny_models


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``gpu`` tests run where a CUDA device is; elsewhere they are skipped, saying why."""
    gpu = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu:
        return
    from nrt.hosting.device_memory import cuda_unavailable

    reason = cuda_unavailable()
    if reason is not None:
        for item in gpu:
            item.add_marker(pytest.mark.skip(reason=reason))


def pytest_configure(config: pytest.Config) -> None:
    """The tests never reach the Hugging Face Hub (these machines cannot): ``hf://`` sources resolve from a
    Hugging Face cache of this run's own (tests build checkpoints there), offline. Set before anything
    imports huggingface_hub, which reads both variables once; subprocesses inherit them."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_CACHE", tempfile.mkdtemp(prefix="nrt-test-hf-cache-"))


@pytest.fixture(scope="session")
def nats_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with nats_server(tmp_path_factory.mktemp("nats")) as url:
        yield url


@pytest.fixture(scope="session")
def bus_keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory of per-service nkey seeds and the server config for them (``nrt.adapters.bus.auth``)."""
    directory = tmp_path_factory.mktemp("bus")
    ensure_credentials(directory)
    return directory


@pytest.fixture(scope="session")
def secure_nats_url(tmp_path_factory: pytest.TempPathFactory, bus_keys: Path) -> Iterator[str]:
    """An embedded nats-server that admits only the identities in ``bus_keys``, with their permissions."""
    with EmbeddedNats(tmp_path_factory.mktemp("secure-nats"), config_file=bus_keys / CONFIG_FILE) as server:
        yield server.url


@pytest.fixture(scope="session")
def postgres_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with postgres_server(tmp_path_factory.mktemp("postgres"), durable=False) as url:
        yield url


def _admin(url: str) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(to_libpq(url), autocommit=True)


@pytest.fixture(scope="session")
def template_database(postgres_url: str) -> Iterator[str]:
    """A database with every migration applied, cloned for each test."""
    name = f"nrt_template_{uuid.uuid4().hex[:8]}"
    with _admin(postgres_url) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    upgrade(with_database(postgres_url, name))
    yield name
    with _admin(postgres_url) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def database_url(postgres_url: str, template_database: str) -> Iterator[str]:
    """A fresh, migrated database of this test's own."""
    name = f"nrt_test_{uuid.uuid4().hex[:12]}"
    with _admin(postgres_url) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_database}"')
    yield with_database(postgres_url, name)
    with _admin(postgres_url) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
async def event_store(database_url: str) -> AsyncIterator[EventStore]:
    store = EventStore.connect(database_url)
    yield store
    await store.close()


@pytest.fixture
async def nc(nats_url: str) -> AsyncIterator[Client]:
    """A NATS connection; the events stream is deleted first so each test starts empty."""
    client = await connect(nats_url, name="nrt-test")
    js = client.jetstream()
    with contextlib.suppress(NotFoundError):
        await js.delete_stream(subjects.EVENTS_STREAM)
    await ensure_events_stream(js)
    yield client
    await client.drain()


@pytest.fixture
async def broker(nc: Client, nats_url: str) -> AsyncIterator[NatsBroker]:
    """A started FastStream broker, as a service runs on (after ``nc`` emptied the event stream)."""
    started = await start_broker(nats_url, "nrt-test-service")
    yield started
    await started.stop()


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def _span_exporter_session() -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return exporter


@pytest.fixture
def spans(_span_exporter_session: InMemorySpanExporter) -> Iterator[InMemorySpanExporter]:
    """Finished spans of this test (the SDK's in-memory exporter on the global provider)."""
    _span_exporter_session.clear()
    yield _span_exporter_session
    _span_exporter_session.clear()


TINY_MODELS_VERSION = "v3"  # bump when the builders in nrt.testing.tiny_models change


@pytest.fixture(scope="session")
def tiny_models_root(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where tiny real ONNX models are built once (pytest's cache dir, kept between runs)."""
    cache = getattr(request.config, "cache", None)
    return (
        cache.mkdir(f"nrt-tiny-models-{TINY_MODELS_VERSION}")
        if cache is not None
        else tmp_path_factory.mktemp("models")
    )


@pytest.fixture(scope="session")
def tiny_artifacts(tiny_models_root: Path) -> Path:
    """A models/ folder with tiny real artifacts: the catalogue's own ``tiny-llama``, prepared by
    ``nrt.adapters.catalogue.prepare`` as a user's would be, and ``tiny-bert`` (an encoder; no catalogue entry)."""
    from nrt.adapters.catalogue import prepare
    from nrt.testing.tiny_models import build_tiny_bert, cached_build

    home = tiny_models_root / "catalogue-home"
    previous = os.environ.get("NRT_HOME")
    os.environ["NRT_HOME"] = str(home)
    try:
        prepare("tiny-llama")  # cached: a second call verifies and returns
    finally:
        if previous is None:
            os.environ.pop("NRT_HOME", None)
        else:
            os.environ["NRT_HOME"] = previous
    cached_build(home / "models", "tiny-bert", build_tiny_bert)
    return home / "models"


@pytest.fixture
def nrt_home(tiny_artifacts: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """NRT_HOME for this test: its models/ holds the tiny artifacts as catalogue entries."""
    home = link_tiny_models(tmp_path / "nrt-home", tiny_artifacts)
    monkeypatch.setenv("NRT_HOME", str(home))
    return home


@pytest.fixture
def hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Hugging Face cache of this test's own, read offline (as huggingface_hub reads
    ``HF_HUB_CACHE`` and ``HF_HUB_OFFLINE`` once, at import, they are patched where it keeps them)."""
    from huggingface_hub import constants

    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache
