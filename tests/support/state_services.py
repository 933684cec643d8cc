"""cluster_state and real workers in this process, on real NATS and PostgreSQL: the pieces the tests drive."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from faststream.nats import NatsBroker

from cluster_state.service import ClusterStateService
from nrt.adapters.bus.broker import start_broker
from nrt.adapters.store import EventStore
from nrt.core.vocabulary import WorkerRole
from nrt.hosting.resources import detect
from nrt.hosting.worker import Worker

StartService = Callable[..., Awaitable[ClusterStateService]]
OnOneWorker = Callable[[str], Awaitable[ClusterStateService]]


async def until_head(store: EventStore, n: int, within: float = 20.0) -> int:
    """Wait until the log holds ``n`` events; the head."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        head = await store.head()
        if head >= n:
            return head
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"the log holds {head} events, expected {n}")
        await asyncio.sleep(0.05)


class RunningWorker:
    """The real specialist worker, in this process, with its own NATS connection and heartbeats (or, with the
    router role, the same worker as router_svc runs it: the entry model's worker)."""

    def __init__(
        self, worker: Worker, broker: NatsBroker, stopping: asyncio.Event, heartbeats: asyncio.Task[None]
    ) -> None:
        self.worker, self.broker, self.stopping, self.heartbeats = worker, broker, stopping, heartbeats
        self.stopped = False

    @property
    def worker_id(self) -> str:
        return self.worker.worker_id

    async def crash(self) -> None:
        """Go silent without a goodbye: no more heartbeats, no WorkerLost, no replies."""
        self.heartbeats.cancel()
        await asyncio.gather(self.heartbeats, return_exceptions=True)
        await self.broker.connection.close()
        self.stopped = True

    async def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        self.stopping.set()
        await self.heartbeats
        await self.worker.stop()
        await self.broker.stop()


class Workers:
    def __init__(self, nats_url: str) -> None:
        self.nats_url = nats_url
        self.running: list[RunningWorker] = []

    async def start(
        self, worker_id: str, heartbeat_s: float = 0.5, role: WorkerRole = WorkerRole.SPECIALIST
    ) -> RunningWorker:
        broker = await start_broker(self.nats_url, f"worker {worker_id}")
        worker = Worker(broker, detect(), worker_id=worker_id, max_batch_size=8, heartbeat_s=heartbeat_s, role=role)
        await worker.start()
        stopping = asyncio.Event()
        running = RunningWorker(worker, broker, stopping, asyncio.create_task(worker.run_heartbeats(stopping)))
        self.running.append(running)
        return running

    async def stop(self) -> None:
        for running in self.running:
            await running.stop()
