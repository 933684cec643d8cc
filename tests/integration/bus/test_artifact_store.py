"""The object store of prepared artifacts on a real nats-server with NRT's identities: whoever hosts models
publishes and fetches (files of several chunks streamed to and from disk), the others may not."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import nats
import nats.errors
import pytest
from nats.aio.client import Client

from nrt.adapters.bus.artifact_store import CHUNK_BYTES, ArtifactRefused, ArtifactStore
from nrt.adapters.bus.connection import reconnecting
from nrt.adapters.bus.contract import Service
from nrt.adapters.bus.credentials import BusCredentials
from nrt.adapters.catalogue.published import PublishedVariant, blob_object, variant_manifest
from nrt.adapters.catalogue.record import describe_files

Connect = Callable[[Service], Awaitable[Client]]


@pytest.fixture
async def as_identity(secure_nats_url: str, bus_keys: Path) -> AsyncIterator[Connect]:
    clients: list[Client] = []

    async def open_as(identity: Service) -> Client:
        options = reconnecting(secure_nats_url, f"test {identity}", credentials=BusCredentials.of(bus_keys, identity))
        client = await nats.connect(secure_nats_url, **options)
        clients.append(client)
        return client

    yield open_as
    for client in clients:
        await client.close()


def a_variant(directory: Path, name: str) -> PublishedVariant:
    """A variant directory whose model spans several chunks and does not end on a chunk's boundary."""
    directory.mkdir(parents=True)
    (directory / "model.onnx").write_bytes(os.urandom(5 * CHUNK_BYTES + 123))
    (directory / "tokenizer.json").write_text('{"model": {}}')
    (directory / "empty.txt").write_bytes(b"")
    files = describe_files(directory, ("empty.txt", "model.onnx", "tokenizer.json"))
    return variant_manifest(name, "cpu", "test:" + name, "test/1", files)


async def test_workers_publish_and_fetch_with_their_own_credentials(as_identity: Connect, tmp_path: Path) -> None:
    variant = a_variant(tmp_path / "a", "auth-test")
    writer = await ArtifactStore.open((await as_identity("specialist_worker")).jetstream())
    assert await writer.publish(tmp_path / "a", variant) == variant.total_bytes
    assert await writer.publish(tmp_path / "a", variant) == 0  # every file is there already: nothing sent again

    reader = await ArtifactStore.open((await as_identity("router_svc")).jetstream())
    assert await reader.variant("auth-test", "cpu") == variant
    (tmp_path / "b").mkdir()
    await reader.download(variant, tmp_path / "b")
    for entry in variant.files:
        assert (tmp_path / "b" / entry.path).read_bytes() == (tmp_path / "a" / entry.path).read_bytes()

    # a file cut short in the store is refused
    model = next(f for f in variant.files if f.path == "model.onnx")
    await writer.store.put(blob_object(model.sha256), (tmp_path / "a" / "model.onnx").read_bytes()[:-1])
    (tmp_path / "c").mkdir()
    with pytest.raises(ArtifactRefused, match=r"model\.onnx has"):
        await reader.download(variant, tmp_path / "c")


async def test_services_that_host_no_model_cannot_reach_the_artifacts(as_identity: Connect) -> None:
    for identity in ("api_gateway", "cluster_state", "nrt"):
        client = await as_identity(identity)  # type: ignore[arg-type]
        with pytest.raises((nats.errors.Error, TimeoutError)):
            await ArtifactStore.open(client.jetstream(timeout=1.0))
