"""What the policies read and what they return: the controller's view, triggers and commands.

``ControlState`` is the folded ``ClusterState`` plus the controller's own bookkeeping
that the event log does not carry: commands sent and not yet visible in the log
(``pending``, for deduplication), the last heartbeat of each worker, and back-off
after failed commands. Every value here is immutable; the shell replaces it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

import msgspec

from nrt.core.events import AnyEvent, Event
from nrt.core.protocol import ControlCommand, WorkerHeartbeat
from nrt.core.state import ClusterState
from nrt.core.vocabulary import Reason, Tier

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class Tuning(msgspec.Struct, frozen=True, kw_only=True):
    """Timing knobs of the controller (not of the manifest)."""

    heartbeat_s: float = 2.0  # the workers' heartbeat interval (services take NRT_HEARTBEAT_S, 0.5 s by default)
    missed_beats: int = 3  # a worker silent for this many intervals is lost
    settle_s: float = 10.0  # how long a command's effect may take to appear in the log after its reply
    retry_s: float = 15.0  # back-off before a failed command for the same model is tried again (the first time)
    max_retry_s: float = 300.0  # the back-off doubles each time the same command makes no progress, up to this
    stale_s: float = 30.0  # events older than this do not trigger warming (e.g. a backlog after a restart)
    join_grace_s: float = 2.0  # a heartbeating worker the log does not know is announced after this long

    @property
    def lost_after_s(self) -> float:
        return self.heartbeat_s * self.missed_beats


GoalKind = Literal["tier", "evicted", "joined", "lost"]


class Pending(msgspec.Struct, frozen=True, kw_only=True):
    """A command sent whose effect the log does not show yet; it dedupes the same command."""

    key: str
    kind: GoalKind
    worker_id: str
    model_id: str | None = None
    session_id: str | None = None
    tier: Tier | None = None  # kind "tier": the tier the model reaches on the worker (unloaded: gone)
    sent_at: datetime
    expires_at: datetime
    replied: bool = False


class WorkerSeen(msgspec.Struct, frozen=True, kw_only=True):
    """The last heartbeat of one worker, and since when it has been beating without a gap."""

    report: WorkerHeartbeat
    last_seen: datetime
    beating_since: datetime
    beats: int = 1  # heartbeats since ``beating_since``


class Stall(msgspec.Struct, frozen=True, kw_only=True):
    """A model's command on a worker that ended ``count`` times in a row without the log showing its
    effect (it failed, or its effect never came): not sent again before ``retry_at``."""

    model_id: str
    worker_id: str
    tier: Tier | None
    count: int
    retry_at: datetime
    why: str


class ControlState(msgspec.Struct, frozen=True, kw_only=True):
    cluster: ClusterState = ClusterState()
    pending: dict[str, Pending] = {}
    seen: dict[str, WorkerSeen] = {}
    gateways: dict[str, datetime] = {}  # gateway id -> when its last heartbeat came
    backoff: dict[str, datetime] = {}  # "model@worker" -> not before
    stalls: dict[str, Stall] = {}  # "model@worker" -> its command's run of no progress (cleared by progress)
    # since when this controller has been hearing heartbeats (its start, or its connection's return): no
    # worker is judged on beats it could not have heard, so a slow start or a bus outage loses no one
    started_at: datetime = EPOCH
    tuning: Tuning = Tuning()

    def pending_for_model(self, model_id: str) -> Pending | None:
        for pending in self.pending.values():
            if pending.model_id == model_id and pending.kind == "tier":
                return pending
        return None

    def live_workers(self, now: datetime) -> list[str]:
        """Workers the log says are alive and that have not missed too many heartbeats, by id."""
        limit = self.tuning.lost_after_s
        live = []
        for worker_id, worker in sorted(self.cluster.workers.items()):
            if not worker.alive:
                continue
            seen = self.seen.get(worker_id)
            last = max(seen.last_seen, self.started_at) if seen is not None else max(self.started_at, worker.joined_at)
            if (now - last).total_seconds() <= limit:
                live.append(worker_id)
        return live

    def gateway_live(self, gateway_id: str, now: datetime) -> bool:
        """Whether the gateway has heartbeated within ``lost_after_s`` (counting from when this controller
        started hearing: a gateway it has not heard yet gets that long to beat)."""
        last = max(self.gateways.get(gateway_id, EPOCH), self.started_at)
        return (now - last).total_seconds() <= self.tuning.lost_after_s

    def tier_of(self, model_id: str, worker_id: str) -> Tier:
        """The model's tier on the worker, counting a pending change as done."""
        key = pending_key(model_id, worker_id)
        pending = self.pending.get(key)
        if pending is not None and pending.tier is not None:
            return pending.tier
        model = self.cluster.models.get(model_id)
        placement = model.placements.get(worker_id) if model is not None else None
        return placement.tier if placement is not None else Tier.UNLOADED


def pending_key(model_id: str, worker_id: str) -> str:
    return f"{model_id}@{worker_id}"


# -- triggers -----------------------------------------------------------------------------


class Tick(msgspec.Struct, frozen=True):
    """Time passed: check liveness and retry placements."""


class Sweep(msgspec.Struct, frozen=True):
    """The session LRU sweep is due (every ``lru.sweep_interval``)."""


class PromoteWanted(msgspec.Struct, frozen=True, kw_only=True):
    """Someone asks for ``model_id`` to be resident now (the promote subject), on ``worker_id`` if given."""

    model_id: str
    reason: Reason = Reason.ON_DEMAND
    worker_id: str | None = None


Trigger = AnyEvent | Tick | Sweep | PromoteWanted


def cause_of(trigger: Trigger, now: datetime) -> str:
    """What the events a decision builds derive their ids from: the triggering event's id, or
    (for a trigger that is not an event) the trigger and the time it came at."""
    if isinstance(trigger, Event):
        return trigger.event_id
    if isinstance(trigger, PromoteWanted):
        return f"PromoteWanted:{trigger.model_id}@{now.isoformat()}"
    return f"{type(trigger).__name__}@{now.isoformat()}"


# -- commands -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Emit:
    """Publish ``event`` to the event stream."""

    event: Event
    group: str = ""


@dataclass(frozen=True, slots=True)
class Control:
    """Send ``command`` to ``worker_id``; ``tier`` is where the model ends up (None: a session's KV is evicted)."""

    worker_id: str
    command: ControlCommand
    tier: Tier | None
    group: str = ""


@dataclass(frozen=True, slots=True)
class Refuse:
    """What was asked cannot be done; ``reason`` says why, with the numbers."""

    model_id: str
    reason: str
    code: str = "budget_exhausted"
    group: str = ""


Command = Emit | Control | Refuse
"""Commands sharing a ``group`` run in order and stop at the first failure; groups run concurrently."""
