"""Builders for the cluster_state tests: manifests, folded states and controller views."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from nrt.core.events import Event, ManifestApplied, ModelPlaced, RequestRouted, RouterFired, TierChanged, WorkerJoined
from nrt.core.manifest import Manifest, parse_manifest
from nrt.core.policies import ControlState, Tuning, absorb, saw_heartbeat
from nrt.core.protocol import WorkerHeartbeat
from nrt.core.vocabulary import WorkerRole

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
GB = 10**9
DEFAULT_TUNING = Tuning()


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def manifest_text(
    *,
    gpu: str = "4GB",
    ram: str = "8GB",
    legal_tier: str = "standby",
    legal_co: str | None = "router",
    legal_hint: str | None = None,
    billing_priority: str = "normal",
    technical_priority: str = "normal",
    cluster: str = "test",
    extra: str = "",
    lru: str = "lru: {idle_threshold: 60s, min_lifetime: 30s, sweep_interval: 10s}",
) -> str:
    co = f"\n      co_activation: {legal_co}" if legal_co else ""
    co += f"\n      promotion_hint: {legal_hint}" if legal_hint else ""
    return f"""cluster: {cluster}
resources:
  gpu_budget: {gpu}
  ram_budget: {ram}
models:
  router:
    source: /models/router
    tier: resident
    priority: critical
    footprint: 1GB
  specialists:
    - id: billing
      source: /models/billing
      tier: resident
      priority: {billing_priority}
      footprint: 1GB
    - id: technical
      source: /models/technical
      tier: resident
      priority: {technical_priority}
      footprint: 1GB
    - id: legal
      source: /models/legal
      tier: {legal_tier}
      footprint: 1GB{co}
{extra}routing:
  entry: router
  dispatch_rule: router.output.intent -> specialists.{{intent}}
{lru}
"""


def manifest(**kwargs: str | None) -> Manifest:
    return parse_manifest(manifest_text(**kwargs), "test.yaml")  # type: ignore[arg-type]


def applied(m: Manifest, version: int = 1, when: datetime = T0) -> ManifestApplied:
    return ManifestApplied(occurred_at=when, version=version, cluster=m.cluster, digest=m.digest, text=m.text)


def joined(
    worker_id: str,
    ram: int = 16 * GB,
    accelerator: int = 0,
    when: datetime = T0,
    role: WorkerRole = WorkerRole.SPECIALIST,
) -> WorkerJoined:
    return WorkerJoined(
        occurred_at=when,
        worker_id=worker_id,
        host=worker_id,
        cpu_count=2,
        ram_bytes=ram,
        accelerator_bytes=accelerator,
        role=role,
    )


def router_host(worker_id: str = "r1", ram: int = 4 * GB, when: datetime = T0) -> WorkerJoined:
    """A router_svc instance: the entry model's worker."""
    return joined(worker_id, ram=ram, when=when, role=WorkerRole.ROUTER)


def placed(model_id: str, worker_id: str, tier: str, size: int = GB, when: datetime = T0) -> list[Event]:
    return [
        ModelPlaced(
            occurred_at=when,
            model_id=model_id,
            worker_id=worker_id,
            artifact=f"/models/{model_id}",
            tier=tier,
            manifest_version=1,
        ),
        TierChanged(
            occurred_at=when,
            model_id=model_id,
            worker_id=worker_id,
            from_tier="unloaded",
            to_tier=tier,
            reason="placement",
            elapsed_ms=1.0,
            bytes_held=size,
        ),
    ]


def fired(model_id: str = "router", intent: str | None = "billing", when: datetime = T0) -> RouterFired:
    return RouterFired(
        occurred_at=when,
        request_id=f"r-{when.timestamp()}",
        model_id=model_id,
        intent=intent,
        scores={},
        latency_ms=1.0,
        manifest_version=1,
    )


def routed(intent: str | None = "billing", when: datetime = T0) -> RequestRouted:
    """router_svc's record of a routed request: the entry model fired and the request was dispatched."""
    return RequestRouted(
        occurred_at=when,
        request_id=f"r-{when.timestamp()}",
        manifest_version=1,
        model_id="router",
        worker_id="r1",
        intent=intent,
        scores={},
        confidence=0.9,
        threshold=0.5,
        target=intent or "fallback",
        rule="router.output.intent -> specialists.{intent}",
        latency_ms=1.0,
    )


def beat(
    worker_id: str, ram: int = 16 * GB, accelerator: int = 0, role: WorkerRole = WorkerRole.SPECIALIST
) -> WorkerHeartbeat:
    return WorkerHeartbeat(
        worker_id=worker_id,
        role=role,
        host=worker_id,
        cpu_count=2,
        ram_bytes=ram,
        accelerator_bytes=accelerator,
        providers=(),
    )


def view(
    events: Iterable[Event], now: datetime = T0, heartbeats: Iterable[str] = (), tuning: Tuning = DEFAULT_TUNING
) -> ControlState:
    """The controller's view after ``events``, with a fresh heartbeat from each of ``heartbeats``."""
    state = ControlState(started_at=now, tuning=tuning)
    for event in events:
        state = absorb(state, event, now)
    for worker_id in heartbeats:
        worker = state.cluster.workers.get(worker_id)
        report = beat(worker_id, worker.ram_bytes, worker.accelerator_bytes, worker.role) if worker else beat(worker_id)
        state = saw_heartbeat(state, report, now)
    return state
