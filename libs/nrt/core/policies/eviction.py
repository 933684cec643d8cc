"""Model LRU under budget pressure.

Promoting a model that would push residents past ``gpu_budget`` (or past its worker's
resident memory) first demotes the least recently used resident models that are not
``critical``, as few as needed; if even that cannot make room, the promotion is refused
with the numbers. The same rule brings the cluster back under budget after a model was
promoted outside the controller (a worker's on-demand cold start).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from nrt.core.events import TierChanged
from nrt.core.manifest import Manifest, Priority, Tier
from nrt.core.policies.budget import Holding, footprint, holdings, room, size, tier_total
from nrt.core.policies.model import EPOCH, Command, Control, ControlState, Refuse
from nrt.core.policies.placement import where
from nrt.core.protocol import ControlCommand
from nrt.core.vocabulary import Reason

_DEMOTE_FIRST = {Priority.LOW: 0, Priority.NORMAL: 1, Priority.HIGH: 2, Priority.CRITICAL: 3}


@dataclass(frozen=True, slots=True)
class Pressure:
    """Bytes over the cluster budget and over one worker's resident memory (<= 0: none)."""

    over_budget: int
    over_worker: int

    @property
    def relieved(self) -> bool:
        return self.over_budget <= 0 and self.over_worker <= 0


def _pressure(state: ControlState, manifest: Manifest, held: list[Holding], worker_id: str | None) -> Pressure:
    budget = manifest.resources.gpu_budget
    over_budget = tier_total(held, Tier.RESIDENT) - budget if budget is not None else 0
    over_worker = 0
    worker = state.cluster.workers.get(worker_id) if worker_id is not None else None
    if worker is not None:
        over_worker = -room(worker, held).free(Tier.RESIDENT)
    return Pressure(over_budget, over_worker)


def _with_tier(held: list[Holding], model_id: str, worker_id: str, tier: Tier, size_if_new: int) -> list[Holding]:
    out = [replace(h, tier=tier) if (h.model_id, h.worker_id) == (model_id, worker_id) else h for h in held]
    if not any((h.model_id, h.worker_id) == (model_id, worker_id) for h in held):
        out.append(Holding(model_id, worker_id, model_id, tier, size_if_new))
    return out


def lru_candidates(state: ControlState, manifest: Manifest, held: list[Holding], protect: set[str]) -> list[Holding]:
    """Resident models that may be demoted, least recently used first; never a critical one."""
    out = []
    for h in held:
        if h.tier != Tier.RESIDENT or h.model_id in protect or state.pending_for_model(h.model_id) is not None:
            continue
        try:
            priority = manifest.model(h.model_id).priority
        except KeyError:
            priority = Priority.LOW  # not in the manifest in force: first to go
        if priority is Priority.CRITICAL:
            continue
        out.append((h, priority))
    models = state.cluster.models

    def last_used(h: Holding) -> datetime:
        model = models.get(h.model_id)
        return model.last_used_at if model is not None and model.last_used_at is not None else EPOCH

    out.sort(key=lambda hp: (last_used(hp[0]), _DEMOTE_FIRST[hp[1]], hp[0].model_id))
    return [h for h, _ in out]


def _relieve(
    state: ControlState, manifest: Manifest, held: list[Holding], worker_id: str | None, protect: set[str]
) -> tuple[list[Holding], Pressure]:
    """The fewest LRU demotions that remove the pressure (or as much of it as can go)."""
    pressure = _pressure(state, manifest, held, worker_id)
    victims: list[Holding] = []
    for victim in lru_candidates(state, manifest, held, protect):
        if pressure.relieved:
            break
        trial = _with_tier(held, victim.model_id, victim.worker_id, Tier.STANDBY, victim.bytes)
        after = _pressure(state, manifest, trial, worker_id)
        helps = (pressure.over_budget > 0 and after.over_budget < pressure.over_budget) or (
            pressure.over_worker > 0 and after.over_worker < pressure.over_worker
        )
        if helps:
            victims.append(victim)
            held, pressure = trial, after
    return victims, pressure


def _demote(victim: Holding, reason: Reason, version: int, group: str) -> Control:
    command = ControlCommand(action="demote", model_id=victim.model_id, reason=reason, manifest_version=version)
    return Control(victim.worker_id, command, tier=Tier.STANDBY, group=group)


def _why_not(
    state: ControlState, manifest: Manifest, held: list[Holding], pressure: Pressure, worker_id: str | None
) -> str:
    parts = []
    if pressure.over_budget > 0:
        budget = manifest.resources.gpu_budget
        parts.append(f"residents would hold {size(tier_total(held, Tier.RESIDENT))} of gpu_budget {size(budget)}")
    if pressure.over_worker > 0 and worker_id is not None:
        parts.append(f"{worker_id} would be {size(pressure.over_worker)} over its resident memory")
    critical = sorted({h.model_id for h in held if h.tier == Tier.RESIDENT and _is_critical(manifest, h.model_id)})
    busy = sorted({h.model_id for h in held if h.tier == Tier.RESIDENT and state.pending_for_model(h.model_id)})
    tail = "no other resident model can be demoted"
    if critical:
        tail += f" ({', '.join(critical)} {'is' if len(critical) == 1 else 'are'} critical)"
    if busy:
        tail += f"; {', '.join(busy)} {'is' if len(busy) == 1 else 'are'} already changing tier"
    return "; ".join(parts) + "; " + tail


def _is_critical(manifest: Manifest, model_id: str) -> bool:
    try:
        return manifest.model(model_id).priority is Priority.CRITICAL
    except KeyError:
        return False


def make_resident(
    state: ControlState,
    manifest: Manifest,
    model_id: str,
    reason: Reason,
    now: datetime,
    group: str = "",
    worker_id: str | None = None,
) -> list[Command]:
    """Promote ``model_id`` on ``worker_id`` (when placed there) or where it is placed, demoting
    LRU non-critical residents first if needed."""
    group = group or f"promote:{model_id}"
    try:
        spec = manifest.model(model_id)
    except KeyError:
        known = ", ".join(manifest.model_ids)
        return [Refuse(model_id, f"model '{model_id}' is not in the manifest; models: {known}", "unknown_model", group)]
    if worker_id is None or state.tier_of(model_id, worker_id) == Tier.UNLOADED:
        worker_id = where(state, model_id)
    if worker_id is None:
        return [Refuse(model_id, f"model '{model_id}' is not placed on any live worker yet", "not_placed", group)]
    if state.tier_of(model_id, worker_id) in (Tier.RESIDENT, Tier.REMOTE) or state.pending_for_model(model_id):
        return []  # already there, or a change is in flight: nothing to add
    need = footprint(spec, state.cluster)
    held = _with_tier(holdings(state, manifest), model_id, worker_id, Tier.RESIDENT, need)
    victims, pressure = _relieve(state, manifest, held, worker_id, protect={model_id})
    if not pressure.relieved:
        why = _why_not(state, manifest, held, pressure, worker_id)
        return [Refuse(model_id, f"cannot make {model_id} resident ({size(need)}): {why}", "budget_exhausted", group)]
    version = state.cluster.manifest_version
    promote = ControlCommand(action="promote", model_id=model_id, reason=reason, manifest_version=version)
    return [
        *(_demote(v, Reason.BUDGET_PRESSURE, version, group) for v in victims),
        Control(worker_id, promote, tier=Tier.RESIDENT, group=group),
    ]


def enforce_budget(state: ControlState, manifest: Manifest, changed: TierChanged, now: datetime) -> list[Command]:
    """After a promotion the controller did not plan (an on-demand cold start), get back under budget."""
    if changed.to_tier != Tier.RESIDENT or state.tier_of(changed.model_id, changed.worker_id) != Tier.RESIDENT:
        return []
    held = holdings(state, manifest)
    victims, pressure = _relieve(state, manifest, held, changed.worker_id, protect={changed.model_id})
    group = f"budget:{changed.model_id}"
    version = state.cluster.manifest_version
    commands: list[Command] = [_demote(v, Reason.BUDGET_PRESSURE, version, group) for v in victims]
    if not pressure.relieved:
        why = _why_not(state, manifest, held, pressure, changed.worker_id)
        reason = f"over budget after {changed.model_id} became resident: {why}"
        commands.append(Refuse(changed.model_id, reason, "over_budget", group))
    return commands
