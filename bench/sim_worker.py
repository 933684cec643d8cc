"""A simulated worker for ``bench.cluster``: NRT's real worker messages on a real NATS connection, no models.

Each :class:`SimWorker` has a nats-py connection of its own and does on the bus what a worker's
``Presence`` and ``Control`` do (``nrt.hosting.presence``, ``nrt.hosting.control``):

- joins with a ``WorkerJoined`` event on the events stream (published as its role's service), then
  sends a ``WorkerHeartbeat`` on ``nrt.workers.heartbeat`` every ``heartbeat_s`` (the production
  interval by default) reporting its memory, its device and the models it holds with their tiers;
- answers the control commands cluster_state sends on ``nrt.control.<worker_id>`` as a worker does:
  the tier steps a real load takes (``unloaded -> standby -> resident``), each recorded as a
  ``TierChanged`` event before the ``ControlReply``, holding ``model_bytes`` per model it holds;
- leaves with ``WorkerLost`` (reason ``shutdown``).

It keeps when each control command arrived (``perf_counter``), for the join-to-placement time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass

import msgspec
import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from nrt.adapters.bus import subjects
from nrt.adapters.bus.jetstream import EventPublisher
from nrt.adapters.inference.weights import CPU
from nrt.core.device import Device
from nrt.core.events import Event, TierChanged, WorkerJoined, WorkerLost
from nrt.core.protocol import ControlCommand, ControlReply, HostedModel, WorkerHeartbeat
from nrt.core.vocabulary import DeviceKind, Reason, Tier, WorkerRole
from nrt.hosting.worker import role_service

log = logging.getLogger("bench.cluster")

HEARTBEAT_S = 0.5  # NRT_HEARTBEAT_S's default: what production workers send at
_commands = msgspec.json.Decoder(ControlCommand)
_encoder = msgspec.json.Encoder()


@dataclass(frozen=True)
class Arrival:
    """A control command and when it reached the worker (``time.perf_counter``)."""

    command: ControlCommand
    at: float


def steps(command: ControlCommand, before: Tier) -> list[Tier]:
    """The tiers a worker passes through carrying out ``command`` from ``before`` (as ``nrt.hosting.tiers`` steps)."""
    if command.action == "load":
        target = command.tier or Tier.RESIDENT
        if before != Tier.UNLOADED:
            return []
        return [Tier.STANDBY, Tier.RESIDENT] if target == Tier.RESIDENT else [target]
    if command.action == "promote":
        return [Tier.RESIDENT] if before == Tier.STANDBY else []
    if command.action == "demote":
        return [Tier.STANDBY] if before == Tier.RESIDENT else []
    if command.action == "unload":
        return [Tier.UNLOADED] if before != Tier.UNLOADED else []
    return []  # evict_session: no tier changes


class SimWorker:
    def __init__(
        self,
        worker_id: str,
        *,
        role: WorkerRole = WorkerRole.SPECIALIST,
        ram_bytes: int = 64 * 10**9,
        model_bytes: int = 10**9,
        heartbeat_s: float = HEARTBEAT_S,
    ) -> None:
        self.worker_id = worker_id
        self.role = role
        self.ram_bytes = ram_bytes
        self.model_bytes = model_bytes
        self.heartbeat_s = heartbeat_s
        self.device = Device(kind=DeviceKind.CPU, id="cpu", name="simulated", total_bytes=ram_bytes)
        self.tiers: dict[str, Tier] = {}
        self.arrivals: list[Arrival] = []
        self.beats = 0  # heartbeats sent
        self.commanded = asyncio.Event()  # set at each control command's arrival
        self._nc: Client | None = None
        self._publisher: EventPublisher | None = None
        self._sub: Subscription | None = None
        self._beating: asyncio.Task[None] | None = None

    @property
    def nc(self) -> Client:
        assert self._nc is not None, "connect() first"
        return self._nc

    async def connect(self, url: str) -> None:
        """Connect and obey ``nrt.control.<worker_id>`` (the server has the subscription when this returns)."""
        self._nc = await nats.connect(url, name=f"sim {self.worker_id}", max_reconnect_attempts=0)
        self._publisher = EventPublisher(self._nc, service=role_service(self.role))
        self._sub = await self._nc.subscribe(subjects.control(self.worker_id), cb=self._on_control)
        await self._nc.flush()

    async def join(self) -> float:
        """Publish ``WorkerJoined`` (stored by the stream when this returns), send the first heartbeat and keep
        beating; the ``perf_counter`` time just before the event went out."""
        joined = WorkerJoined(
            worker_id=self.worker_id,
            host=self.worker_id,
            cpu_count=8,
            ram_bytes=self.ram_bytes,
            accelerator_bytes=0,
            providers=(CPU,),
            role=self.role,
            device=self.device,
        )
        started = time.perf_counter()
        await self._publish(joined)
        await self.beat()
        self._beating = asyncio.create_task(self._beat_forever(), name=f"sim {self.worker_id} heartbeats")
        return started

    async def beat(self) -> None:
        held = sum(self.model_bytes for tier in self.tiers.values() if tier != Tier.UNLOADED)
        heartbeat = WorkerHeartbeat(
            worker_id=self.worker_id,
            role=self.role,
            host=self.worker_id,
            cpu_count=8,
            ram_bytes=self.ram_bytes,
            accelerator_bytes=0,
            providers=(CPU,),
            models=tuple(
                HostedModel(model_id=model_id, tier=tier, bytes_held=self.model_bytes)
                for model_id, tier in self.tiers.items()
                if tier != Tier.UNLOADED
            ),
            sent_at=time.time(),
            device=self.device,
            device_free_bytes=self.ram_bytes - held,
        )
        await self.nc.publish(subjects.WORKER_HEARTBEAT, _encoder.encode(heartbeat))
        self.beats += 1

    async def _beat_forever(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_s)
            try:
                await self.beat()
            except Exception as exc:  # a closing connection: the next beat says more, or close() stops us
                log.debug("%s: heartbeat failed: %s", self.worker_id, exc)

    async def leave(self) -> None:
        """Stop beating and say goodbye (``WorkerLost``, shutdown), as a stopping worker does."""
        await self._stop_beating()
        await self._publish(WorkerLost(worker_id=self.worker_id, reason=Reason.SHUTDOWN))

    async def close(self) -> None:
        await self._stop_beating()
        if self._nc is not None and not self._nc.is_closed:
            await self._nc.close()

    async def _stop_beating(self) -> None:
        if self._beating is not None:
            self._beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._beating
            self._beating = None

    async def _publish(self, event: Event) -> None:
        assert self._publisher is not None, "connect() first"
        await self._publisher.publish(event)

    async def _on_control(self, msg: Msg) -> None:
        arrived = time.perf_counter()
        command = _commands.decode(msg.data)
        self.arrivals.append(Arrival(command, arrived))
        self.commanded.set()
        started = time.perf_counter()
        before = self.tiers.get(command.model_id, Tier.UNLOADED)
        tier = before
        for step in steps(command, before):
            await self._publish(
                TierChanged(
                    model_id=command.model_id,
                    worker_id=self.worker_id,
                    from_tier=tier,
                    to_tier=step,
                    reason=command.reason,
                    elapsed_ms=0.0,
                    bytes_held=self.model_bytes if step != Tier.UNLOADED else 0,
                )
            )
            tier = step
        self.tiers[command.model_id] = tier
        reply = ControlReply(
            worker_id=self.worker_id,
            model_id=command.model_id,
            tier=tier,
            bytes_held=self.model_bytes if tier != Tier.UNLOADED else 0,
            elapsed_ms=(time.perf_counter() - started) * 1e3,
            changed=tier != before or command.action == "evict_session",
        )
        await msg.respond(_encoder.encode(reply))

    async def first_command(self, model_id: str, after: float, within: float) -> Arrival:
        """The first control command for ``model_id`` that arrived after ``after``; TimeoutError after ``within`` s."""
        deadline = time.perf_counter() + within
        while True:
            for arrival in self.arrivals:
                if arrival.command.model_id == model_id and arrival.at >= after:
                    return arrival
            self.commanded.clear()
            left = deadline - time.perf_counter()
            if left <= 0:
                raise TimeoutError(f"no control command for {model_id} reached {self.worker_id} within {within:g}s")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.commanded.wait(), left)
