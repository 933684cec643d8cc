"""The controller's own bookkeeping, kept pure: what it sent, what it heard, what failed.

The shell calls ``absorb`` for every recorded event, ``note_sent`` with the commands it
is about to execute, ``note_reply`` when a worker answers, and ``saw_heartbeat`` for
each heartbeat. ``pending`` entries disappear once the log shows their effect, when the
command failed, or when they expire.

A model's command on a worker that fails, or whose effect never reaches the log before its
pending entry expires, made no progress: it is a ``Stall`` of that model on that worker, and
the same command waits ``retry_s``, then twice that, and so on up to ``max_retry_s``, before it
is sent again. The log showing the effect clears the stall.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from msgspec.structs import replace

from nrt.core.events import Event, WorkerJoined, WorkerLost
from nrt.core.policies.model import Command, Control, ControlState, Emit, Pending, Stall, WorkerSeen, pending_key
from nrt.core.protocol import GatewayHeartbeat, WorkerHeartbeat
from nrt.core.state import ClusterState, evolve
from nrt.core.vocabulary import Tier

LOAD_TIMEOUT_S = 300.0  # loading reads (and may convert) a model: minutes on a cold cache
CONTROL_TIMEOUT_S = 60.0  # promote, demote, unload, evict_session


def control_timeout(control: Control) -> float:
    return LOAD_TIMEOUT_S if control.command.action == "load" else CONTROL_TIMEOUT_S


def control_key(control: Control) -> str:
    command = control.command
    if command.action == "evict_session":
        return f"session:{command.session_id}"
    return pending_key(command.model_id, control.worker_id)


def _pending_of(command: Command, now: datetime, settle_s: float) -> Pending | None:
    if isinstance(command, Control):
        timeout = timedelta(seconds=control_timeout(command) + settle_s)
        c = command.command
        if c.action == "evict_session":
            return Pending(
                key=control_key(command),
                kind="evicted",
                worker_id=command.worker_id,
                model_id=None,
                session_id=c.session_id,
                sent_at=now,
                expires_at=now + timeout,
            )
        return Pending(
            key=control_key(command),
            kind="tier",
            worker_id=command.worker_id,
            model_id=c.model_id,
            tier=command.tier,
            sent_at=now,
            expires_at=now + timeout,
        )
    if isinstance(command, Emit) and isinstance(command.event, WorkerLost | WorkerJoined):
        worker_id = command.event.worker_id
        return Pending(
            key=f"worker:{worker_id}",
            kind="lost" if isinstance(command.event, WorkerLost) else "joined",
            worker_id=worker_id,
            sent_at=now,
            expires_at=now + timedelta(seconds=settle_s),
        )
    return None


def note_sent(state: ControlState, commands: Sequence[Command], now: datetime) -> ControlState:
    """``state`` with every command about to run recorded as pending."""
    added = {p.key: p for c in commands if (p := _pending_of(c, now, state.tuning.settle_s)) is not None}
    if not added:
        return state
    return replace(state, pending={**state.pending, **added})


def note_reply(state: ControlState, control: Control, ok: bool, now: datetime) -> ControlState:
    """A worker answered ``control``: wait a little for its event, or forget it and back off."""
    key = control_key(control)
    pending = dict(state.pending)
    current = pending.get(key)
    if ok:
        if current is not None:
            pending[key] = replace(current, replied=True, expires_at=now + timedelta(seconds=state.tuning.settle_s))
        return settle(replace(state, pending=pending), now)
    pending.pop(key, None)
    state = replace(state, pending=pending)
    command = control.command
    if command.action == "evict_session":
        return state
    return stalled(state, key, command.model_id, control.worker_id, control.tier, f"{command.action} failed", now)


def stalled(
    state: ControlState, key: str, model_id: str, worker_id: str, tier: Tier | None, why: str, now: datetime
) -> ControlState:
    """``state`` with one more command for ``key`` that made no progress, and its back-off doubled."""
    previous = state.stalls.get(key)
    count = previous.count + 1 if previous is not None else 1
    tuning = state.tuning
    delay = min(tuning.max_retry_s, tuning.retry_s * 2 ** min(count - 1, 30))
    retry_at = now + timedelta(seconds=delay)
    stall = Stall(model_id=model_id, worker_id=worker_id, tier=tier, count=count, retry_at=retry_at, why=why)
    return replace(
        state,
        stalls={**state.stalls, key: stall},
        backoff={**state.backoff, key: max(retry_at, state.backoff.get(key, retry_at))},
    )


def reached(cluster: ClusterState, pending: Pending) -> bool:
    """Whether the log already shows what ``pending`` waits for (or never can)."""
    worker = cluster.workers.get(pending.worker_id)
    if pending.kind == "lost":
        return worker is None or not worker.alive
    if pending.kind == "joined":
        return worker is not None and worker.alive
    if worker is None or not worker.alive:
        return True  # the worker is gone: nothing will come of it
    if pending.kind == "evicted":
        session = cluster.sessions.get(pending.session_id or "")
        return session is None or session.kv_evicted
    model = cluster.models.get(pending.model_id or "")
    placement = model.placements.get(pending.worker_id) if model is not None else None
    tier = placement.tier if placement is not None else Tier.UNLOADED
    return tier == pending.tier


def progressed(cluster: ClusterState, pending: Pending) -> bool:
    """The log shows the tier ``pending`` waited for, on a worker that is alive."""
    worker = cluster.workers.get(pending.worker_id)
    return pending.kind == "tier" and worker is not None and worker.alive and reached(cluster, pending)


def settle(state: ControlState, now: datetime) -> ControlState:
    """Drop pending entries whose effect is in the log or whose time is up (a tier change whose time
    is up made no progress: a stall); drop old back-offs; clear the stalls the log shows progress on."""
    keep: dict[str, Pending] = {}
    cleared: set[str] = set()
    expired: list[Pending] = []
    for key, pending in state.pending.items():
        if reached(state.cluster, pending):
            if progressed(state.cluster, pending):
                cleared.add(key)
        elif pending.expires_at <= now:
            if pending.kind == "tier":
                expired.append(pending)
        else:
            keep[key] = pending
    backoff = {k: t for k, t in state.backoff.items() if t > now}
    if len(keep) == len(state.pending) and len(backoff) == len(state.backoff):
        return state
    stalls = {k: s for k, s in state.stalls.items() if k not in cleared}
    state = replace(state, pending=keep, backoff=backoff, stalls=stalls)
    for pending in expired:
        why = f"the log did not show it {pending.tier} in time" if pending.replied else "the worker did not answer"
        state = stalled(state, pending.key, pending.model_id or "", pending.worker_id, pending.tier, why, now)
    return state


def absorb(state: ControlState, event: Event, now: datetime) -> ControlState:
    """Fold a recorded event into the controller's view."""
    cluster = evolve(state.cluster, event)
    seen = state.seen
    if isinstance(event, WorkerLost) and event.worker_id in seen:
        seen = {k: v for k, v in seen.items() if k != event.worker_id}  # it must beat again to come back
    return settle(replace(state, cluster=cluster, seen=seen), now)


def saw_heartbeat(state: ControlState, beat: WorkerHeartbeat, now: datetime) -> ControlState:
    previous = state.seen.get(beat.worker_id)
    continuing = previous is not None and (now - previous.last_seen).total_seconds() <= state.tuning.lost_after_s
    seen = WorkerSeen(
        report=beat,
        last_seen=now,
        beating_since=previous.beating_since if continuing and previous is not None else now,
        beats=previous.beats + 1 if continuing and previous is not None else 1,
    )
    return replace(state, seen={**state.seen, beat.worker_id: seen})


def saw_gateway(state: ControlState, beat: GatewayHeartbeat, now: datetime) -> ControlState:
    """A gateway's heartbeat; gateways silent for ten times ``lost_after_s`` are forgotten (a restarted
    gateway comes back under a new id)."""
    forget = state.tuning.lost_after_s * 10
    gateways = {g: at for g, at in state.gateways.items() if (now - at).total_seconds() <= forget}
    gateways[beat.gateway_id] = now
    return replace(state, gateways=gateways)
