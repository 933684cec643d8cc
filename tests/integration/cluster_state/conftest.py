"""Fixtures for the cluster_state service tests: the service in this process, on real NATS and PostgreSQL."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from faststream.nats import NatsBroker
from nats.aio.client import Client

from cluster_state.service import ClusterStateService
from nrt.adapters.bus.jetstream import StreamLimits
from nrt.core.policies import Tuning
from nrt.core.vocabulary import KeyScope, WorkerRole
from state_services import OnOneWorker, StartService, Workers
from worker_helpers import ALL_PLACED, FAST, placed_as


@pytest.fixture
async def start_cluster_state(broker: NatsBroker, database_url: str) -> AsyncIterator[StartService]:
    """Start cluster_state in this process (stopped at the end of the test)."""
    started: list[ClusterStateService] = []

    async def start(
        manifest_text: str | None = None,
        tuning: Tuning | None = None,
        tick_s: float = 0.2,
        keys: dict[KeyScope, str] | None = None,
        snapshot_every_events: int = 10_000,
        snapshot_every_s: float = 60.0,
        stream_limits: StreamLimits | None = None,
    ) -> ClusterStateService:
        service = ClusterStateService(
            broker,
            database_url,
            manifest_text=manifest_text,
            tuning=tuning,
            tick_s=tick_s,
            keys=keys,
            snapshot_every_events=snapshot_every_events,
            snapshot_every_s=snapshot_every_s,
            stream_limits=stream_limits,
        )
        await asyncio.wait_for(service.start(), 30)
        started.append(service)
        return service

    yield start
    for service in started:
        await service.stop()


@pytest.fixture
async def workers(nc: Client, nats_url: str, nrt_home: Path) -> AsyncIterator[Workers]:
    """Start real workers on demand (NRT_HOME holds the tiny models); all stopped after the test."""
    pool = Workers(nats_url)
    yield pool
    await pool.stop()


@pytest.fixture
def llama_copies(nrt_home: Path, tmp_path: Path) -> Callable[[str], str]:
    """A separate copy of the tiny Llama export per name: distinct artifacts, each with its own bytes."""

    def copy(name: str) -> str:
        target = tmp_path / "artifacts" / name
        if not target.exists():
            shutil.copytree((nrt_home / "models" / "tiny-llama").resolve(), target)
        return str(target)

    return copy


@pytest.fixture
def on_one_worker(workers: Workers, start_cluster_state: StartService) -> OnOneWorker:
    """Start worker w1 and router host r1 (the entry model's worker, as router_svc runs it), then
    cluster_state with ``manifest_text``; return once every model is placed."""

    async def start(manifest_text: str) -> ClusterStateService:
        await workers.start("w1")
        await workers.start("r1", role=WorkerRole.ROUTER)
        service = await start_cluster_state(manifest_text=manifest_text, tuning=FAST)
        await service.controller.wait_for(placed_as(ALL_PLACED), within=60)
        return service

    return start
