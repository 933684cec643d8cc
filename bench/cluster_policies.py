"""The pure part of cluster_state's per-worker cost, in process: ``bench.cluster``'s attribution.

A ``ControlState`` folded from real events (the bench manifest applied, ``workers`` specialist workers
joined and beating, the specialists placed), then timed as cluster_state runs it: a tick
(``settle`` + ``decide(Tick)``: liveness, stalls, orphans, placement), every ``TICK_S``; and a
heartbeat's bookkeeping (``saw_heartbeat``). Best of ``rounds`` runs of ``calls`` calls each.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime

from cluster_state.controller import parse_in_force
from nrt.core.events import Event, ManifestApplied, ModelPlaced, TierChanged, WorkerJoined
from nrt.core.policies import ControlState, Tick, absorb, decide, saw_heartbeat, settle
from nrt.core.protocol import WorkerHeartbeat
from nrt.core.vocabulary import Reason, Tier

TICK_S = 0.25  # ClusterStateService's tick


@dataclass(frozen=True)
class PolicyCost:
    workers: int
    tick_us: float  # one tick's policies
    heartbeat_us: float  # one heartbeat's bookkeeping

    @property
    def tick_us_per_worker_s(self) -> float:
        """The ticks' CPU each second, per worker (microseconds)."""
        return self.tick_us / TICK_S / self.workers


def folded(manifest_text: str, specialists: dict[str, Tier], workers: int, ram_bytes: int) -> ControlState:
    manifest = parse_in_force(manifest_text, 1)
    now = datetime.now(UTC)
    ids = [f"w{i:04d}" for i in range(workers)]
    events: list[Event] = [
        ManifestApplied(version=1, cluster=manifest.cluster, digest=manifest.digest, text=manifest.text)
    ]
    events += [WorkerJoined(worker_id=w, host=w, cpu_count=8, ram_bytes=ram_bytes) for w in ids]
    for i, (model_id, tier) in enumerate(specialists.items()):
        worker_id = ids[i % workers]
        spec = manifest.model(model_id)
        events.append(
            ModelPlaced(model_id=model_id, worker_id=worker_id, artifact=spec.source, tier=tier, manifest_version=1)
        )
        events.append(
            TierChanged(
                model_id=model_id,
                worker_id=worker_id,
                from_tier=Tier.UNLOADED,
                to_tier=tier,
                reason=Reason.PLACEMENT,
                elapsed_ms=0.0,
                bytes_held=10**9,
            )
        )
    state = ControlState(started_at=now)
    for event in events:
        state = absorb(state, event, now)
    for beat in beats(ids, ram_bytes):
        state = saw_heartbeat(state, beat, now)
    return state


def beats(ids: list[str], ram_bytes: int) -> list[WorkerHeartbeat]:
    return [
        WorkerHeartbeat(worker_id=w, host=w, cpu_count=8, ram_bytes=ram_bytes, accelerator_bytes=0, providers=("cpu",))
        for w in ids
    ]


def measure(
    manifest_text: str, specialists: dict[str, Tier], workers: int, ram_bytes: int, calls: int = 200, rounds: int = 3
) -> PolicyCost:
    state = folded(manifest_text, specialists, workers, ram_bytes)
    manifest = parse_in_force(manifest_text, 1)
    heartbeats = beats([f"w{i:04d}" for i in range(workers)], ram_bytes)
    now = datetime.now(UTC)
    tick_s = heartbeat_s = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(calls):
            decide(settle(state, now), manifest, Tick(), now)
        tick_s = min(tick_s, (time.perf_counter() - started) / calls)
        started = time.perf_counter()
        beaten = state
        for i in range(calls):
            beaten = saw_heartbeat(beaten, heartbeats[i % workers], now)
        heartbeat_s = min(heartbeat_s, (time.perf_counter() - started) / calls)
    return PolicyCost(workers=workers, tick_us=tick_s * 1e6, heartbeat_us=heartbeat_s * 1e6)
