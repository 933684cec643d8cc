"""Worker liveness from heartbeats.

A worker the log says is alive but that has not heartbeated for ``missed_beats``
intervals is lost (``WorkerLost``, reason ``heartbeat_timeout``); placement then moves
its models. A worker that heartbeats but that the log does not know as alive (it came
back after being marked lost, or its own announcement was lost) is announced with
``WorkerJoined`` built from its heartbeat, after a short grace for its own announcement.
"""

from __future__ import annotations

from datetime import datetime

from nrt.core.events import WorkerJoined, WorkerLost, derived_event_id
from nrt.core.policies.model import Command, ControlState, Emit
from nrt.core.vocabulary import Reason


def worker_key(worker_id: str) -> str:
    return f"worker:{worker_id}"


def check(state: ControlState, now: datetime, cause: str) -> list[Command]:
    """``WorkerLost`` / ``WorkerJoined`` as the heartbeats say, stamped ``now`` with ids derived from ``cause``."""
    commands: list[Command] = []
    tuning = state.tuning
    live = set(state.live_workers(now))
    for worker_id, worker in sorted(state.cluster.workers.items()):
        if worker.alive and worker_id not in live and worker_key(worker_id) not in state.pending:
            lost = WorkerLost(
                event_id=derived_event_id(cause, "WorkerLost", worker_id),
                occurred_at=now,
                worker_id=worker_id,
                reason=Reason.HEARTBEAT_TIMEOUT,
            )
            commands.append(Emit(lost, group=worker_key(worker_id)))
    for worker_id, seen in sorted(state.seen.items()):
        known = state.cluster.workers.get(worker_id)
        if known is not None and known.alive:
            continue
        beating = (now - seen.last_seen).total_seconds() <= tuning.lost_after_s
        settled = seen.beats >= 2 and (now - seen.beating_since).total_seconds() >= tuning.join_grace_s
        if beating and settled and worker_key(worker_id) not in state.pending:
            r = seen.report
            joined = WorkerJoined(
                event_id=derived_event_id(cause, "WorkerJoined", worker_id),
                occurred_at=now,
                worker_id=worker_id,
                host=r.host,
                cpu_count=r.cpu_count,
                ram_bytes=r.ram_bytes,
                accelerator_bytes=r.accelerator_bytes,
                providers=r.providers,
                role=r.role,
                device=r.device,
            )
            commands.append(Emit(joined, group=worker_key(worker_id)))
    return commands


def unheard(state: ControlState) -> list[str]:
    """Workers the log holds as alive that have not heartbeated since this controller started: after a
    restart, each either beats soon or is declared lost once ``lost_after_s`` has passed."""
    return [w for w, worker in sorted(state.cluster.workers.items()) if worker.alive and w not in state.seen]
