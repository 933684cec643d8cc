"""Events prove their origin: a worker's forged ManifestApplied reaches neither PostgreSQL nor any fold.

The real cluster_state records the stream (real PostgreSQL) and a gateway-style follower folds it, each
connected to an authenticating nats-server with its own identity; a client with the worker's credentials
tries to forge the manifest, first on cluster_state's subject (the server refuses it), then on its own
(the recorder and the followers reject it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from nats.js.errors import NotFoundError

from cluster_helpers import manifest_text
from cluster_state.service import ClusterStateService
from nrt.adapters.bus import subjects
from nrt.adapters.bus.broker import start_broker
from nrt.adapters.bus.connection import connect, reconnecting
from nrt.adapters.bus.credentials import BusCredentials
from nrt.adapters.bus.follow import EventFollower
from nrt.adapters.bus.jetstream import EventPublisher, ensure_events_stream
from nrt.adapters.store import EventStore
from nrt.core.events import ManifestApplied, WorkerJoined, encode


@pytest.fixture
async def fresh_stream(secure_nats_url: str, bus_keys: Path) -> AsyncIterator[None]:
    """The events stream, empty (deleted and re-created by ``nrt``, one of its owners)."""
    admin = await connect(secure_nats_url, "test nrt", credentials=BusCredentials.of(bus_keys, "nrt"))
    js = admin.jetstream()
    with contextlib.suppress(NotFoundError):
        await js.delete_stream(subjects.EVENTS_STREAM)
    await ensure_events_stream(js)
    yield
    await admin.close()


async def test_a_forged_manifest_reaches_neither_the_log_nor_a_fold(
    secure_nats_url: str,
    bus_keys: Path,
    fresh_stream: None,
    event_store: EventStore,
    database_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    state_broker = await start_broker(
        secure_nats_url, "cluster_state", credentials=BusCredentials.of(bus_keys, "cluster_state")
    )
    service = ClusterStateService(state_broker, database_url, manifest_text=manifest_text(), tick_s=0.2)
    gateway_broker = await start_broker(
        secure_nats_url, "api_gateway", credentials=BusCredentials.of(bus_keys, "api_gateway")
    )
    follower = EventFollower(gateway_broker)
    errors: list[Exception] = []

    async def collect(exc: Exception) -> None:
        errors.append(exc)

    options = reconnecting(secure_nats_url, "forger", credentials=BusCredentials.of(bus_keys, "specialist_worker"))
    worker: Client = await nats.connect(secure_nats_url, **(options | {"error_cb": collect}))
    try:
        await asyncio.wait_for(service.start(), 30)  # bootstraps manifest v1, as cluster_state
        await follower.start()
        await follower.wait_for(lambda s: s.manifest_version == 1, within=10)
        real = service.controller.cluster
        forged = ManifestApplied(version=2, cluster="forged", digest="f" * 64, text="cluster: forged\n")

        # on cluster_state's own subject: the server refuses the publish, so JetStream never answers
        with pytest.raises((NatsTimeout, NoRespondersError)):
            await worker.jetstream(timeout=1).publish(
                subjects.event("cluster_state", "ManifestApplied"), encode(forged)
            )
        assert any("permissions violation for publish" in str(e).lower() for e in errors)

        # on its own subject, which may not carry a manifest: stored by the stream, rejected by its readers
        caplog.set_level(logging.ERROR, logger="nrt.cluster_state.recorder")
        publisher = EventPublisher(worker, service="specialist_worker")
        await publisher.publish(forged)
        joined = WorkerJoined(worker_id="w1", host="h1", cpu_count=2, ram_bytes=2**30)
        await publisher.publish(joined)  # what a worker may say: recorded after the forgery
        await follower.wait_for(lambda s: "w1" in s.workers, within=10)
        for _ in range(100):
            if joined.event_id in [r.event.event_id async for r in event_store.read_positions()]:
                break
            await asyncio.sleep(0.05)
        recorded = [r.event async for r in event_store.read_positions()]
        assert joined.event_id in [e.event_id for e in recorded]
        assert forged.event_id not in [e.event_id for e in recorded]
        assert [e.version for e in recorded if isinstance(e, ManifestApplied)] == [1]
        assert service.recorder.rejected == 1
        assert any(
            "rejected ManifestApplied" in r.getMessage()
            and "nrt.events.specialist_worker.ManifestApplied" in r.getMessage()
            for r in caplog.records
        )
        assert service.controller.cluster.manifest_version == 1
        assert service.controller.cluster.manifest_digest == real.manifest_digest
        assert follower.state.manifest_version == 1  # the gateway's fold never saw it either
        assert follower.state.manifest_digest == real.manifest_digest
    finally:
        await worker.close()
        await service.stop()
        await gateway_broker.stop()
        await state_broker.stop()
