"""The plan of a drained manifest swap: what changes, what to warm first, what to undo, what to do after.

``nrt.policies.swap_machine`` runs a swap through its phases on this plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from nrt.manifest import Manifest, Tier
from nrt.policies.budget import Holding, footprint, holdings
from nrt.policies.eviction import make_resident
from nrt.policies.model import Command, Control, ControlState
from nrt.policies.placement import check_fit, choose, order, place
from nrt.protocol import ControlCommand
from nrt.vocabulary import Reason

WARM_PREFIX = "warm:"  # the group of one added model's placement and load


def warm_group(model_id: str) -> str:
    return WARM_PREFIX + model_id


@dataclass(frozen=True, slots=True)
class SwapPlan:
    from_version: int
    to_version: int
    added: tuple[str, ...]  # new model ids
    removed: tuple[str, ...]  # ids the new manifest drops
    replaced: tuple[str, ...]  # same id, another source: unloaded after the cut-over, then placed anew
    retiered: tuple[str, ...]  # same id and source, another declared tier: changed after the cut-over
    warm: tuple[Command, ...]  # place and load added models beside the old ones, before the drain
    deferred: tuple[str, ...]  # added models that only fit once removed ones are gone: placed after

    @property
    def warmed(self) -> tuple[str, ...]:
        return tuple(c.command.model_id for c in self.warm if isinstance(c, Control))


@dataclass(frozen=True, slots=True)
class SwapRejected:
    problems: tuple[str, ...]

    @property
    def message(self) -> str:
        return "the new manifest does not fit: " + "; ".join(self.problems)


def plan_swap(
    state: ControlState, old: Manifest | None, new: Manifest, now: datetime, cause: str
) -> SwapPlan | SwapRejected:
    """What replacing ``old`` with ``new`` changes, or why ``new`` does not fit; the placements of
    the warm-up are stamped ``now`` with ids derived from ``cause``."""
    old_specs = {s.id: s for s in old.models} if old is not None else {}
    new_specs = {s.id: s for s in new.models}
    added = tuple(i for i in new_specs if i not in old_specs)
    removed = tuple(i for i in old_specs if i not in new_specs)
    replaced = tuple(i for i in new_specs if i in old_specs and old_specs[i].source != new_specs[i].source)
    kept = frozenset(i for i in new_specs if i in old_specs and i not in replaced)
    retiered = tuple(sorted(i for i in kept if old_specs[i].tier is not new_specs[i].tier))
    problems = check_fit(state, new, now, keep=kept)
    if problems:
        return SwapRejected(tuple(problems))
    to_version = state.cluster.manifest_version + 1
    live = state.live_workers(now)
    workers = [state.cluster.workers[w] for w in live]
    held: list[Holding] = holdings(state, old)  # the old models keep serving while the new ones load
    warm: list[Command] = []
    deferred: list[str] = []
    for spec in order(new, state.cluster):
        if spec.id not in added:
            continue
        need = footprint(spec, state.cluster)
        worker_id, _ = choose(spec, need, workers, held)
        if worker_id is None:
            deferred.append(spec.id)
            continue
        held.append(Holding(spec.id, worker_id, spec.source, spec.tier, need))
        warm.extend(place(spec, worker_id, to_version, Reason.MANIFEST_SWAP, warm_group(spec.id), cause=cause, now=now))
    return SwapPlan(
        from_version=state.cluster.manifest_version,
        to_version=to_version,
        added=added,
        removed=removed,
        replaced=replaced,
        retiered=retiered,
        warm=tuple(warm),
        deferred=tuple(deferred),
    )


def undo_warm(plan: SwapPlan) -> list[Command]:
    """Unload what a failed swap warmed, so the old manifest serves exactly as before."""
    return [
        Control(
            c.worker_id,
            ControlCommand(
                action="unload", model_id=c.command.model_id, reason=Reason.MANIFEST_SWAP_ABORTED, manifest_version=0
            ),
            tier=Tier.UNLOADED,
            group=f"undo:{c.command.model_id}",
        )
        for c in plan.warm
        if isinstance(c, Control)
    ]


def after_cutover(state: ControlState, new: Manifest, plan: SwapPlan, now: datetime) -> list[Command]:
    """Unload dropped and replaced models; move kept models whose declared tier changed."""
    commands: list[Command] = []
    version = plan.to_version
    for model_id in (*plan.removed, *plan.replaced):
        model = state.cluster.models.get(model_id)
        for worker_id in sorted(model.placements if model is not None else {}):
            command = ControlCommand(
                action="unload", model_id=model_id, reason=Reason.MANIFEST_SWAP, manifest_version=version
            )
            commands.append(Control(worker_id, command, tier=Tier.UNLOADED, group=f"unload:{model_id}"))
    for model_id in plan.retiered:
        spec = new.model(model_id)
        model = state.cluster.models.get(model_id)
        placements = model.placements if model is not None else {}
        if spec.tier is Tier.RESIDENT:
            commands.extend(make_resident(state, new, model_id, Reason.MANIFEST_SWAP, now, group=f"retier:{model_id}"))
        elif spec.tier is Tier.STANDBY:
            for worker_id, placement in sorted(placements.items()):
                if placement.tier == Tier.RESIDENT:
                    command = ControlCommand(
                        action="demote", model_id=model_id, reason=Reason.MANIFEST_SWAP, manifest_version=version
                    )
                    commands.append(Control(worker_id, command, tier=Tier.STANDBY, group=f"retier:{model_id}"))
    return commands
