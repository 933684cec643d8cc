"""Placement: which live worker hosts each manifest model, within memory and budgets.

Workers have a role. The manifest's entry model goes to the router hosts (router_svc
instances: each classifies in its own process, so each holds a copy); every other model
goes to ``replicas`` specialist workers (one unless its manifest entry says more; fewer while
fewer workers have room, and a copy is added when one joins). A model whose hosts are not up yet waits for them.

Deterministic: residents first, then standby, then remote; critical before high before
normal before low; larger before smaller; then manifest order. A specialist goes to a
worker that already holds its artifact (no extra bytes) if one has room, else to the
worker with the most room left, ties broken by worker id.

A model whose manifest says ``device: gpu`` goes only to workers with a GPU, one that says
``device: cpu`` only to workers without; with none of those live, it is refused with the reason
(and placed once such a worker joins).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from nrt.core.events import ModelPlaced, derived_event_id
from nrt.core.manifest import Manifest, ModelSpec, Priority, Tier
from nrt.core.policies.budget import (
    Holding,
    budget_for,
    budget_key,
    footprint,
    holdings,
    room,
    shares_artifact,
    size,
    tier_total,
)
from nrt.core.policies.model import Command, Control, ControlState, Emit, Refuse, pending_key
from nrt.core.protocol import ControlCommand
from nrt.core.state import ClusterState, WorkerState
from nrt.core.vocabulary import TIER_RANK, DeviceRequirement, Reason, WorkerRole

_TIER_ORDER = {Tier.RESIDENT: 0, Tier.STANDBY: 1, Tier.REMOTE: 2, Tier.UNLOADED: 3}
_PRIORITY_ORDER = {Priority.CRITICAL: 0, Priority.HIGH: 1, Priority.NORMAL: 2, Priority.LOW: 3}


def order(manifest: Manifest, cluster: ClusterState) -> list[ModelSpec]:
    index = {spec.id: i for i, spec in enumerate(manifest.models)}
    return sorted(
        manifest.models,
        key=lambda s: (_TIER_ORDER[s.tier], _PRIORITY_ORDER[s.priority], -footprint(s, cluster), index[s.id]),
    )


def host_role(manifest: Manifest, model_id: str) -> WorkerRole:
    """The role of the workers that host ``model_id``: router hosts for the entry model, else specialist workers."""
    return WorkerRole.ROUTER if model_id == manifest.routing.entry else WorkerRole.SPECIALIST


def hosts(state: ControlState, live: Sequence[str], role: WorkerRole) -> list[WorkerState]:
    """The live workers (ids in ``live``) of ``role``, in id order."""
    return [w for worker_id in live if (w := state.cluster.workers[worker_id]).role is role]


def holds(state: ControlState, model_id: str, worker_id: str) -> bool:
    """``worker_id`` holds ``model_id`` (or a change towards holding it is pending)."""
    return state.tier_of(model_id, worker_id) != Tier.UNLOADED


def device_mismatch(spec: ModelSpec, worker: WorkerState) -> str | None:
    """Why ``worker`` cannot run ``spec`` on the device its manifest asks for (None: it can)."""
    if spec.device is DeviceRequirement.GPU and not worker.accelerator:
        return f"{worker.worker_id} has no GPU ({spec.id} asks for device: gpu)"
    if spec.device is DeviceRequirement.CPU and worker.accelerator:
        return f"{worker.worker_id} has a GPU ({spec.id} asks for device: cpu)"
    return None


def choose(
    spec: ModelSpec,
    need: int,
    workers: Sequence[WorkerState],
    held: Sequence[Holding],
    avoid: frozenset[str] = frozenset(),
) -> tuple[str | None, str]:
    """The worker for ``spec`` at its declared tier, on the device it asks for, or None and why none
    fits (with the numbers)."""
    tier = spec.tier
    best: tuple[tuple[int, int, str], str] | None = None
    reasons = []
    for worker in workers:
        if worker.worker_id in avoid:
            reasons.append(f"{worker.worker_id} failed to load it recently")
            continue
        mismatch = device_mismatch(spec, worker)
        if mismatch is not None:
            reasons.append(mismatch)
            continue
        before = room(worker, held)
        after = room(worker, [*held, Holding(spec.id, worker.worker_id, spec.source, tier, need)])
        if after.free(tier) < 0:
            reasons.append(before.describe())
            continue
        shared = shares_artifact(held, worker.worker_id, spec.source)
        score = (0 if shared else 1, -after.free(tier), worker.worker_id)
        if best is None or score < best[0]:
            best = (score, worker.worker_id)
    if best is not None:
        return best[1], ""
    return None, "; ".join(reasons) if reasons else "no live worker"


def place(
    spec: ModelSpec, worker_id: str, version: int, reason: Reason, group: str, *, cause: str, now: datetime
) -> list[Command]:
    """Record the placement (stamped ``now``, its id derived from ``cause``), then tell the worker
    to load the model at its declared tier."""
    tier = spec.tier
    placed = ModelPlaced(
        event_id=derived_event_id(cause, "ModelPlaced", spec.id, worker_id),
        occurred_at=now,
        model_id=spec.id,
        worker_id=worker_id,
        artifact=spec.source,
        tier=tier,
        manifest_version=version,
    )
    load = ControlCommand(
        action="load", model_id=spec.id, reason=reason, source=spec.source, tier=tier, manifest_version=version
    )
    return [Emit(placed, group=group), Control(worker_id, load, tier=tier, group=group)]


def is_placed(state: ControlState, model_id: str) -> bool:
    """Held (or being loaded) on a worker the log says is alive."""
    model = state.cluster.models.get(model_id)
    if model is not None:
        for worker_id, placement in model.placements.items():
            worker = state.cluster.workers.get(worker_id)
            if worker is not None and worker.alive and placement.tier != Tier.UNLOADED:
                return True
    pending = state.pending_for_model(model_id)
    return pending is not None and pending.tier != Tier.UNLOADED


def where(state: ControlState, model_id: str) -> str | None:
    """The alive worker that holds ``model_id`` at the highest tier (pending changes counted), if any."""
    model = state.cluster.models.get(model_id)
    candidates = set(model.placements) if model is not None else set()
    candidates |= {p.worker_id for p in state.pending.values() if p.model_id == model_id and p.kind == "tier"}
    best: tuple[int, str] | None = None
    for worker_id in sorted(candidates):
        worker = state.cluster.workers.get(worker_id)
        tier = state.tier_of(model_id, worker_id)
        if worker is None or not worker.alive or tier == Tier.UNLOADED:
            continue
        if best is None or TIER_RANK[tier] > best[0]:
            best = (TIER_RANK[tier], worker_id)
    return best[1] if best is not None else None


def reconcile(state: ControlState, manifest: Manifest, now: datetime, cause: str) -> list[Command]:
    """Place every manifest model that no alive worker of its role holds (first start, a new worker,
    a lost one); the entry model on every live router host that lacks it."""
    live = state.live_workers(now)
    if not live:
        return []
    held = holdings(state, manifest)
    version = state.cluster.manifest_version
    commands: list[Command] = []
    by_role: dict[WorkerRole, list[WorkerState]] = {}
    for spec in order(manifest, state.cluster):
        role = host_role(manifest, spec.id)
        if role not in by_role:
            by_role[role] = hosts(state, live, role)
        workers = by_role[role]
        if not workers:
            continue  # its hosts are not up yet
        if role is not WorkerRole.ROUTER and spec.replicas == 1 and is_placed(state, spec.id):
            continue  # the common case on a tick: settled before any per-worker work
        need = footprint(spec, state.cluster)
        avoid = frozenset(
            w.worker_id for w in workers if state.backoff.get(pending_key(spec.id, w.worker_id), now) > now
        )
        if role is WorkerRole.ROUTER:
            lacking = [w for w in workers if not holds(state, spec.id, w.worker_id) and w.worker_id not in avoid]
            added, why_not = fits_everywhere(spec, need, lacking, held)
            commands.extend(Refuse(spec.id, why, code="unplaceable") for why in why_not)
            for copy in added:
                held.append(copy)
                group = f"place:{spec.id}@{copy.worker_id}"
                commands.extend(place(spec, copy.worker_id, version, Reason.PLACEMENT, group, cause=cause, now=now))
            continue
        holders = copies(state, spec.id)
        if len(holders) >= spec.replicas:
            continue
        if len(avoid) == len(workers):
            continue  # every worker failed it recently: wait for the back-off
        for _ in range(spec.replicas - len(holders)):
            others = [w for w in workers if w.worker_id not in holders]
            worker_id, why = choose(spec, need, others, held, avoid) if others else (None, "")
            if worker_id is None:
                if not holders:  # a missing extra copy is no refusal: the model is served
                    reason = f"cannot place {spec.id} ({spec.tier.value}, {size(need)}): {why}"
                    commands.append(Refuse(spec.id, reason, code="unplaceable"))
                break
            group = f"place:{spec.id}" if not holders else f"place:{spec.id}@{worker_id}"
            held.append(Holding(spec.id, worker_id, spec.source, spec.tier, need))
            holders.add(worker_id)
            commands.extend(place(spec, worker_id, version, Reason.PLACEMENT, group, cause=cause, now=now))
    return commands


def copies(state: ControlState, model_id: str) -> set[str]:
    """The alive workers that hold ``model_id`` (or are loading it: a pending change counts)."""
    model = state.cluster.models.get(model_id)
    candidates = set(model.placements) if model is not None else set()
    candidates |= {p.worker_id for p in state.pending.values() if p.model_id == model_id and p.kind == "tier"}
    return {
        worker_id
        for worker_id in candidates
        if (worker := state.cluster.workers.get(worker_id)) is not None
        and worker.alive
        and state.tier_of(model_id, worker_id) != Tier.UNLOADED
    }


def fits_everywhere(
    spec: ModelSpec, need: int, workers: Sequence[WorkerState], held: list[Holding]
) -> tuple[list[Holding], list[str]]:
    """A copy of ``spec`` on each of ``workers`` (the entry model on every router host): the holdings
    they add, and why a worker has no room for its copy."""
    added: list[Holding] = []
    problems: list[str] = []
    for worker in workers:
        worker_id, why = choose(spec, need, [worker], [*held, *added])
        if worker_id is None:
            problems.append(f"cannot place {spec.id} ({spec.tier.value}, {size(need)}) on a router host: {why}")
            continue
        added.append(Holding(spec.id, worker_id, spec.source, spec.tier, need))
    return added, problems


def budget_problems(manifest: Manifest, cluster: ClusterState) -> list[str]:
    """Declared tiers against the manifest's budgets; models sharing a source are counted once (per replica)."""
    problems = []
    for tier in (Tier.RESIDENT, Tier.STANDBY):
        budget = budget_for(manifest, tier)
        if budget is None:
            continue
        by_source: dict[str, tuple[list[str], int]] = {}
        for spec in manifest.models:
            if spec.tier is tier:
                ids, known = by_source.get(spec.source, ([], 0))
                copies = footprint(spec, cluster) * spec.replicas  # each replica holds its own copy
                by_source[spec.source] = ([*ids, spec.id], max(known, copies))
        total = sum(n for _, n in by_source.values())
        if total > budget:
            parts = ", ".join(f"{'+'.join(ids)} {size(n)}" for ids, n in by_source.values())
            key = budget_key(tier)
            problems.append(
                f"{tier.value} models need {size(total)} ({parts}) but {key} is {size(budget)}; "
                f"raise {key} or move models to another tier"
            )
    return problems


def check_fit(state: ControlState, manifest: Manifest, now: datetime, keep: frozenset[str] = frozenset()) -> list[str]:
    """Why ``manifest``'s declared tiers cannot fit the budgets and the live workers (empty: they fit).

    Models in ``keep`` stay where they are; every other model is placed as if the
    workers held only the kept ones.
    """
    problems = budget_problems(manifest, state.cluster)
    live = state.live_workers(now)
    held = [h for h in holdings(state, manifest) if h.model_id in keep]
    for spec in order(manifest, state.cluster):
        if spec.id in keep:
            continue
        role = host_role(manifest, spec.id)
        workers = hosts(state, live, role)
        if not workers:
            continue  # placement waits for hosts of its role
        need = footprint(spec, state.cluster)
        if role is WorkerRole.ROUTER:
            added, why_not = fits_everywhere(spec, need, workers, held)
            held.extend(added)
            problems.extend(why_not)
            continue
        worker_id, why = choose(spec, need, workers, held)
        if worker_id is None:
            problems.append(f"cannot place {spec.id} ({spec.tier.value}, {size(need)}): {why}")
            continue
        held.append(Holding(spec.id, worker_id, spec.source, spec.tier, need))
    return problems


def resident_total(state: ControlState, manifest: Manifest) -> int:
    return tier_total(holdings(state, manifest), Tier.RESIDENT)
