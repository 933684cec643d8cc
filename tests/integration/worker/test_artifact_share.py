"""Prepared models travel over the bus: a worker on another "host" (its own NRT_HOME, a Hugging Face cache
that holds nothing and cannot reach the Hub) fetches what a first one prepared from the NRT_ARTIFACTS object
store on real NATS, verifies it and serves it; a tampered object is refused, never installed."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from faststream.nats import NatsBroker
from nats.aio.client import Client
from nats.js.errors import NotFoundError

from nrt.adapters.bus import rpc, subjects
from nrt.adapters.bus.artifact_store import ArtifactStore
from nrt.adapters.bus.errors import RemoteError
from nrt.adapters.bus.jetstream import ARTIFACTS_STREAM
from nrt.adapters.catalogue.published import blob_object
from nrt.core.events import TierChanged, Weights
from nrt.core.protocol import ControlCommand, ControlReply
from nrt.hosting.resources import detect
from nrt.hosting.worker import Worker
from nrt.testing.hf_checkpoints import put_in_cache, save_checkpoint
from worker_calls import events, generate

LLAMA = "catalogue://tiny-llama"


@pytest.fixture
async def store(nc: Client) -> ArtifactStore:
    """The artifacts bucket, emptied first (each test starts with nothing published)."""
    js = nc.jetstream()
    with contextlib.suppress(NotFoundError):
        await js.delete_stream(ARTIFACTS_STREAM)
    return await ArtifactStore.open(js)


async def load(nc: Client, worker: Worker, model_id: str, source: str) -> ControlReply:
    command = ControlCommand(action="load", model_id=model_id, source=source, tier="resident", reason="placement")
    return await rpc.request(nc, subjects.control(worker.worker_id), command, ControlReply, timeout=600)


async def loaded_weights(nc: Client, worker: Worker, model_id: str) -> Weights:
    changes = [
        e
        for e in await events(nc, 1_000, within=0.5)
        if isinstance(e, TierChanged) and e.worker_id == worker.worker_id and e.model_id == model_id
    ]
    weights = [e.weights for e in changes if e.weights is not None]
    assert len(weights) == 1, changes
    return weights[0]


@contextlib.asynccontextmanager
async def running(broker: NatsBroker, worker_id: str, *, share: bool = True) -> AsyncIterator[Worker]:
    worker = Worker(broker, detect(), worker_id=worker_id, max_batch_size=4, share_artifacts=share)
    await worker.start()
    try:
        yield worker
    finally:
        await worker.stop()  # waits for its uploads under way


def another_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> Path:
    """Make this process another host: an empty NRT_HOME and an empty, offline Hugging Face cache."""
    from huggingface_hub import constants

    home = tmp_path / name
    (home / "models").mkdir(parents=True)
    monkeypatch.setenv("NRT_HOME", str(home))
    cache = tmp_path / f"{name}-hf-cache"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return home


async def test_a_host_without_the_hub_serves_what_another_prepared(
    nc: Client,
    broker: NatsBroker,
    store: ArtifactStore,
    nrt_home: Path,
    hf_cache: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    commit = put_in_cache(hf_cache, "acme/billing", save_checkpoint(tmp_path / "ckpt", "llama"))
    async with running(broker, "w-a") as first:
        assert (await load(nc, first, "billing", "hf://acme/billing")).tier == "resident"
        prepared = await loaded_weights(nc, first, "billing")
        assert first.artifacts is not None
        await first.artifacts.settle()
        uploads = first.artifacts.transfers
    assert prepared.origin == "prepared"
    assert prepared.source == f"hf://acme/billing@{commit}"
    name = await store.alias("hf://acme/billing")
    assert name is not None
    assert name.startswith("user-hf-acme-billing-")
    published = await store.variant(name, "cpu")
    assert published is not None
    assert {"model.onnx", "tokenizer.json", "nrt-artifact.json"} <= {f.path for f in published.files}

    home = another_host(tmp_path, monkeypatch, "host-b")
    async with running(broker, "w-alone", share=False) as alone:  # without the bus, this host cannot serve it
        with pytest.raises(RemoteError, match="not in the Hugging Face cache"):
            await load(nc, alone, "billing", "hf://acme/billing")
    async with running(broker, "w-b") as second:
        assert (await load(nc, second, "billing", "hf://acme/billing")).tier == "resident"
        chunks = await generate(nc, "billing", "The quick brown fox", max_tokens=4)
        assert chunks[-1].usage is not None
        assert chunks[-1].usage.completion_tokens >= 1
        assert {c.worker_id for c in chunks} == {"w-b"}
        fetched = await loaded_weights(nc, second, "billing")
        assert second.artifacts is not None
        downloads = second.artifacts.transfers
    assert fetched.origin == "fetched"
    assert [(t.direction, t.name, t.provider) for t in uploads] == [("published", name, "cpu")]
    assert [(t.direction, t.name, t.bytes) for t in downloads] == [("fetched", name, published.total_bytes)]
    assert uploads[0].bytes == published.total_bytes
    # exactly the weights the first host prepared: same provenance, same files
    assert (fetched.source, fetched.sha256, fetched.bytes) == (prepared.source, prepared.sha256, prepared.bytes)
    assert (home / "models" / name / "nrt-artifact.json").is_file()
    assert not list((home / "models").glob(".staging-*"))

    async with running(broker, "w-b2") as restarted:  # host B again, still offline: what it fetched serves
        assert (await load(nc, restarted, "billing", "hf://acme/billing")).tier == "resident"
        again = await loaded_weights(nc, restarted, "billing")
        assert restarted.artifacts is not None
        assert restarted.artifacts.transfers == []  # nothing moved: the digest here is the published one
    assert (again.origin, again.sha256) == ("cache", prepared.sha256)


async def test_a_tampered_object_is_refused_and_never_installed(
    nc: Client,
    broker: NatsBroker,
    store: ArtifactStore,
    nrt_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with running(broker, "w-a") as first:
        await load(nc, first, "llama", LLAMA)  # prepared here already: published for the others
        assert (await loaded_weights(nc, first, "llama")).origin == "cache"
        assert first.artifacts is not None
        await first.artifacts.settle()
    published = await store.variant("tiny-llama", "cpu")
    assert published is not None
    model = next(f for f in published.files if f.path == "model.onnx")
    original = (nrt_home / "models" / "tiny-llama" / "model.onnx").read_bytes()
    forged = bytearray(original)
    forged[len(forged) // 2] ^= 0xFF  # one byte flipped, the size unchanged
    await store.store.put(blob_object(model.sha256), bytes(forged))

    home = another_host(tmp_path, monkeypatch, "host-b")
    caplog.set_level(logging.WARNING, logger="nrt.worker")
    async with running(broker, "w-b") as second:
        with pytest.raises(RemoteError, match="'tiny-llama' is not prepared on this worker"):
            await load(nc, second, "llama", LLAMA)  # refused, and this host cannot prepare it: the load fails
        refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
        assert len(refused) == 1, caplog.records
        assert "model.onnx has sha256" in refused[0]
        assert not (home / "models" / "tiny-llama").exists()
        assert not list((home / "models").glob(".staging-*"))

        await store.store.put(blob_object(model.sha256), original)  # the object restored: fetched, verified, served
        assert (await load(nc, second, "llama", LLAMA)).tier == "resident"
        assert (await loaded_weights(nc, second, "llama")).origin == "fetched"
        chunks = await generate(nc, "llama", "The quick brown fox", max_tokens=2)
        assert chunks[-1].finish_reason is not None
