"""Session LRU: evict the KV cache of sessions that idle too long; the weights stay resident.

Every ``lru.sweep_interval`` a session whose last turn is more than ``idle_threshold``
ago and that was opened at least ``min_lifetime`` ago gets ``evict_session`` on its
worker. Sessions already evicted, on a worker that is gone, or with an eviction in
flight are skipped.
"""

from __future__ import annotations

from datetime import datetime

from nrt.core.manifest import Manifest
from nrt.core.policies.model import Command, Control, ControlState
from nrt.core.protocol import ControlCommand
from nrt.core.state import SessionState
from nrt.core.vocabulary import Reason


def session_key(session_id: str) -> str:
    return f"session:{session_id}"


def is_idle(session: SessionState, manifest: Manifest, now: datetime) -> bool:
    idle = (now - session.last_used_at).total_seconds()
    age = (now - session.opened_at).total_seconds()
    return idle > manifest.lru.idle_threshold and age >= manifest.lru.min_lifetime


def sweep(state: ControlState, manifest: Manifest, now: datetime) -> list[Command]:
    commands: list[Command] = []
    version = state.cluster.manifest_version
    for session in sorted(state.cluster.sessions.values(), key=lambda s: (s.last_used_at, s.session_id)):
        worker = state.cluster.workers.get(session.worker_id)
        if session.kv_evicted or worker is None or not worker.alive:
            continue
        if session_key(session.session_id) in state.pending or not is_idle(session, manifest, now):
            continue
        command = ControlCommand(
            action="evict_session",
            model_id=session.model_id,
            session_id=session.session_id,
            reason=Reason.IDLE,
            manifest_version=version,
        )
        commands.append(Control(session.worker_id, command, tier=None, group=session_key(session.session_id)))
    return commands
