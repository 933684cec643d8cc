"""Bytes: what each model needs, what each worker and each budget has left.

Residents count against ``gpu_budget`` (and the worker's accelerator memory, or its
RAM on a CPU host); standby models against ``ram_budget`` (and the worker's RAM). What a
resident holds is what its worker measured: on a GPU worker the device memory its session
holds, on a CPU host its weights and its session's RAM.
Models that share one artifact on one worker share one copy: they are charged once,
at the highest tier any of them holds there. The KV caches a resident model keeps for its
sessions (the bytes its worker measured, as the log recorded them) count against the
resident budget too, each model's on top of the shared weights, and so do the shared prompt
prefixes' KV caches it keeps (``PrefixKvStored`` until ``PrefixKvEvicted``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from nrt.core.manifest import Manifest, ModelSpec, Tier
from nrt.core.policies.model import ControlState
from nrt.core.state import ClusterState, WorkerState
from nrt.core.units import format_size
from nrt.core.vocabulary import TIER_RANK


def with_footprints(manifest: Manifest, footprint_of: Callable[[str], int | None]) -> Manifest:
    """``manifest`` with every model's ``footprint`` filled from ``footprint_of`` where it was not declared."""
    resolved: dict[str, int | None] = {}
    for spec in manifest.models:
        if spec.footprint is None and spec.tier is not Tier.REMOTE:
            resolved[spec.id] = footprint_of(spec.source)

    def fill(spec: ModelSpec) -> ModelSpec:
        size = resolved.get(spec.id)
        return replace(spec, footprint=size) if size is not None else spec

    return replace(
        manifest,
        router=fill(manifest.router),
        specialists=tuple(fill(s) for s in manifest.specialists),
        fallback=fill(manifest.fallback) if manifest.fallback is not None else None,
    )


def footprint(spec: ModelSpec, cluster: ClusterState) -> int:
    """Bytes ``spec`` needs: the larger of what was declared and what a worker reported holding."""
    if spec.tier is Tier.REMOTE:
        return 0
    model = cluster.models.get(spec.id)
    observed = max((p.bytes_held for p in model.placements.values()), default=0) if model is not None else 0
    return max(spec.footprint or 0, observed)


def size(n: int | None) -> str:
    return "unlimited" if n is None else format_size(n)


@dataclass(frozen=True, slots=True)
class Holding:
    """One model held on one worker at one tier."""

    model_id: str
    worker_id: str
    artifact: str
    tier: Tier
    bytes: int
    kv_bytes: int = 0  # the sessions' and shared prefixes' KV caches it holds (resident only)

    @property
    def charge(self) -> int:
        """Bytes it counts against its tier: the weights, and the sessions' KV while resident."""
        return self.bytes + (self.kv_bytes if self.tier == Tier.RESIDENT else 0)


def kv_bytes(cluster: ClusterState) -> dict[tuple[str, str], int]:
    """The KV bytes held by ``(model_id, worker_id)``, as last measured: the sessions' and the shared
    prefixes' (one pass over each)."""
    out: dict[tuple[str, str], int] = {}
    for s in cluster.sessions.values():
        if not s.kv_evicted:
            key = (s.model_id, s.worker_id)
            out[key] = out.get(key, 0) + s.kv_bytes
    for p in cluster.prefixes.values():
        key = (p.model_id, p.worker_id)
        out[key] = out.get(key, 0) + p.kv_bytes
    return out


def holdings(state: ControlState, manifest: Manifest | None) -> list[Holding]:
    """Every model held on a live-or-alive worker, with pending changes counted as done."""
    specs = {s.id: s for s in manifest.models} if manifest is not None else {}
    kv = kv_bytes(state.cluster)
    out: list[Holding] = []
    seen: set[tuple[str, str]] = set()
    for model_id, model in sorted(state.cluster.models.items()):
        for worker_id in sorted(model.placements):
            worker = state.cluster.workers.get(worker_id)
            if worker is None or not worker.alive:
                continue
            seen.add((model_id, worker_id))
            out.append(_holding(state, specs.get(model_id), model_id, worker_id, model.artifact, kv))
    for pending in state.pending.values():  # loads sent but not yet in the log
        if pending.kind != "tier" or pending.model_id is None or (pending.model_id, pending.worker_id) in seen:
            continue
        spec = specs.get(pending.model_id)
        artifact = spec.source if spec is not None else pending.model_id
        out.append(_holding(state, spec, pending.model_id, pending.worker_id, artifact, kv))
    return [h for h in out if h.tier != Tier.UNLOADED]


def _holding(
    state: ControlState,
    spec: ModelSpec | None,
    model_id: str,
    worker_id: str,
    artifact: str,
    kv: Mapping[tuple[str, str], int],
) -> Holding:
    tier = state.tier_of(model_id, worker_id)
    model = state.cluster.models.get(model_id)
    placement = model.placements.get(worker_id) if model is not None else None
    held = placement.bytes_held if placement is not None else 0
    declared = footprint(spec, state.cluster) if spec is not None else 0
    return Holding(
        model_id, worker_id, artifact or model_id, tier, max(held, declared), kv.get((model_id, worker_id), 0)
    )


def charged(held: Iterable[Holding]) -> dict[tuple[str, str], Holding]:
    """One charge per (worker, artifact): the highest tier and the largest size among its holders."""
    out: dict[tuple[str, str], Holding] = {}
    for h in held:
        key = (h.worker_id, h.artifact)
        known = out.get(key)
        if known is None:
            out[key] = h
        else:
            tier = h.tier if TIER_RANK[h.tier] > TIER_RANK[known.tier] else known.tier
            out[key] = replace(known, tier=tier, bytes=max(known.bytes, h.bytes), kv_bytes=known.kv_bytes + h.kv_bytes)
    return out


def tier_total(held: Iterable[Holding], tier: Tier) -> int:
    return sum(h.charge for h in charged(held).values() if h.tier == tier)


@dataclass(frozen=True, slots=True)
class WorkerRoom:
    """Capacity and use of one worker. On a CPU host residents and standby share one RAM pool."""

    worker_id: str
    accelerator: bool
    resident_cap: int
    standby_cap: int
    resident_used: int
    standby_used: int

    def free(self, tier: Tier) -> int:
        if tier == Tier.REMOTE:
            return 1 << 62
        if not self.accelerator:
            return self.standby_cap - self.resident_used - self.standby_used
        if tier == Tier.RESIDENT:
            return self.resident_cap - self.resident_used
        return self.standby_cap - self.standby_used

    def describe(self) -> str:
        if self.accelerator:
            return (
                f"{self.worker_id} has {size(max(self.free(Tier.RESIDENT), 0))} free of {size(self.resident_cap)} "
                f"accelerator memory and {size(max(self.free(Tier.STANDBY), 0))} free of {size(self.standby_cap)} RAM"
            )
        return f"{self.worker_id} has {size(max(self.free(Tier.STANDBY), 0))} free of {size(self.standby_cap)} RAM"


def room(worker: WorkerState, held: Iterable[Holding]) -> WorkerRoom:
    mine = [h for h in charged(held).values() if h.worker_id == worker.worker_id]
    return WorkerRoom(
        worker_id=worker.worker_id,
        accelerator=worker.accelerator,
        resident_cap=worker.accelerator_bytes if worker.accelerator else worker.ram_bytes,
        standby_cap=worker.ram_bytes,
        resident_used=sum(h.charge for h in mine if h.tier == Tier.RESIDENT),
        standby_used=sum(h.charge for h in mine if h.tier == Tier.STANDBY),
    )


def shares_artifact(held: Iterable[Holding], worker_id: str, artifact: str) -> bool:
    return any(h.worker_id == worker_id and h.artifact == artifact for h in held)


def budget_for(manifest: Manifest, tier: Tier) -> int | None:
    if tier == Tier.RESIDENT:
        return manifest.resources.gpu_budget
    if tier == Tier.STANDBY:
        return manifest.resources.ram_budget
    return None


def budget_key(tier: Tier) -> str:
    return "gpu_budget" if tier == Tier.RESIDENT else "ram_budget"
