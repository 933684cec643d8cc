"""The worker's presence in the cluster: it joins, beats, leaves, and records facts in the background.

``WorkerJoined`` and ``WorkerLost`` are published and awaited; the heartbeat reports what the
worker offers and holds (a :class:`WorkerHeartbeat` every ``heartbeat_s``); the other jobs'
events go through :meth:`Presence.emit` (an :class:`EventSink`), which never makes a reply
wait for JetStream. How an event or a heartbeat reaches the bus is the shell's (see ports).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import msgspec

from nrt.core.events import Event, WorkerJoined, WorkerLost
from nrt.core.protocol import HostedModel, WorkerHeartbeat
from nrt.core.vocabulary import Reason, WorkerRole
from nrt.hosting.model_host import ModelHost
from nrt.hosting.resources import HostResources
from nrt.hosting.shell_ports import Publisher, SendHeartbeat

log = logging.getLogger("nrt.worker")


def heartbeat(
    worker_id: str,
    resources: HostResources,
    host: ModelHost,
    sent_at: float,
    role: WorkerRole = WorkerRole.SPECIALIST,
) -> WorkerHeartbeat:
    """What this worker offers and holds: its device and the memory free on it, every hosted model with
    its tier, bytes, requests and sessions."""
    return WorkerHeartbeat(
        worker_id=worker_id,
        role=role,
        **msgspec.structs.asdict(resources),
        models=tuple(
            HostedModel(
                model_id=h.model_id,
                tier=host.tier(h.model_id),
                bytes_held=host.bytes_held(h.model_id),
                active_requests=h.active_requests,
                sessions=len(h.sessions),
            )
            for h in list(host.hosted.values())
        ),
        sent_at=sent_at,
        device_free_bytes=host.memory.free_bytes(),
    )


class Presence:
    def __init__(
        self,
        worker_id: str,
        resources: HostResources,
        host: ModelHost,
        publisher: Publisher,
        send_heartbeat: SendHeartbeat,
        heartbeat_s: float = 0.5,
        role: WorkerRole = WorkerRole.SPECIALIST,
    ) -> None:
        self.worker_id = worker_id
        self.role = role  # a router_svc instance (the entry model's worker) or a specialist worker
        self.resources = resources
        self.host = host
        self.publisher = publisher
        self.send_heartbeat = send_heartbeat
        self.heartbeat_s = heartbeat_s
        self._background: set[asyncio.Task[None]] = set()

    async def join(self) -> None:
        """Announce this worker (``WorkerJoined``), then send its first heartbeat."""
        resources = msgspec.structs.asdict(self.resources)
        await self.publisher.publish(WorkerJoined(worker_id=self.worker_id, role=self.role, **resources))
        await self.beat()

    async def beat(self) -> None:
        await self.send_heartbeat(heartbeat(self.worker_id, self.resources, self.host, time.time(), self.role))

    async def run_heartbeats(self, stopping: asyncio.Event) -> None:
        """Beat every ``heartbeat_s`` until ``stopping`` is set."""
        while not stopping.is_set():
            await self.beat()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), self.heartbeat_s)

    async def leave(self, reason: Reason = Reason.SHUTDOWN) -> None:
        """Wait for the events still being published, then say goodbye (``WorkerLost``)."""
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        await self.publisher.publish(WorkerLost(worker_id=self.worker_id, reason=reason))

    def emit(self, event: Event) -> None:
        """Publish in the background: a reply never waits for its events."""
        task = asyncio.create_task(self._publish(event))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _publish(self, event: Event) -> None:
        try:
            await self.publisher.publish(event)
        except Exception:
            log.exception("could not publish %s", event.type)
