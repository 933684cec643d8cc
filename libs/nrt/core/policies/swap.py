"""The plan of a drained manifest swap: what changes, what to warm first, what to undo, what to do after.

``nrt.core.policies.swap_machine`` runs a swap through its phases on this plan.

A router change (the entry model's source replaced) cannot be loaded beside the old router on
its router host, since a worker holds one copy per model id. It is reloaded there instead once
the drain is over, before the cut-over: no request admitted under the old version still needs
the old router, new requests are held, and the first one admitted under the new version finds
the new router loaded and resident.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from nrt.core.manifest import Manifest, Tier, diff_manifests
from nrt.core.policies.budget import Holding, footprint, holdings
from nrt.core.policies.eviction import make_resident
from nrt.core.policies.model import Command, Control, ControlState
from nrt.core.policies.placement import check_fit, choose, fits_everywhere, host_role, hosts, order, place
from nrt.core.protocol import ControlCommand
from nrt.core.vocabulary import Reason, WorkerRole

WARM_PREFIX = "warm:"  # the group of one added model's placement and load
RELOAD_PREFIX = "reload:"  # the group of one router host's reload of a replaced entry model


def warm_group(model_id: str) -> str:
    return WARM_PREFIX + model_id


def reload_group(model_id: str, worker_id: str) -> str:
    return f"{RELOAD_PREFIX}{model_id}@{worker_id}"


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
    reload: tuple[Command, ...] = ()  # a replaced entry model: reloaded on its router hosts after the drain
    restore: tuple[Command, ...] = ()  # the old entry model loaded again on those hosts, if a reload fails

    @property
    def warmed(self) -> tuple[str, ...]:
        """The models loaded before the cut-over: the added ones, and a reloaded entry model."""
        loads = (c.command.model_id for c in (*self.warm, *self.reload) if isinstance(c, Control))
        return tuple(dict.fromkeys(m for m in loads))

    @property
    def reloaded(self) -> frozenset[tuple[str, str]]:
        """(model id, worker id) of every reload: those copies are the new manifest's already."""
        return frozenset(
            (c.command.model_id, c.worker_id)
            for c in self.reload
            if isinstance(c, Control) and c.command.action == "load"
        )


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
    changes = diff_manifests(old, new)
    added, removed, replaced, retiered = changes.added, changes.removed, changes.replaced, changes.retiered
    kept = frozenset(s.id for s in new.models if s.id not in added and s.id not in replaced)
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
        role = host_role(new, spec.id)
        candidates = [w for w in workers if w.role is role]
        if role is WorkerRole.ROUTER and candidates:  # a new entry model: a copy on every router host
            copies, _ = fits_everywhere(spec, need, candidates, held)
            held.extend(copies)
            for copy in copies:
                group = warm_group(spec.id)
                warm.extend(place(spec, copy.worker_id, to_version, Reason.MANIFEST_SWAP, group, cause=cause, now=now))
            continue
        worker_id, _ = choose(spec, need, candidates, held)
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
        reload=tuple(reload_entry(state, new, replaced, to_version, now, cause)),
        restore=tuple(restore_entry(state, old, new, replaced, now, cause)) if old is not None else (),
    )


def _entry_hosts(state: ControlState, new: Manifest, replaced: tuple[str, ...], now: datetime) -> list[str]:
    """The live router hosts holding the entry model, when the new manifest replaces its source."""
    entry = new.routing.entry
    model = state.cluster.models.get(entry)
    if entry not in replaced or model is None:
        return []
    return [
        w.worker_id for w in hosts(state, state.live_workers(now), WorkerRole.ROUTER) if w.worker_id in model.placements
    ]


def reload_entry(
    state: ControlState, new: Manifest, replaced: tuple[str, ...], version: int, now: datetime, cause: str
) -> list[Command]:
    """A replaced entry model, on each live router host that holds it: unload the old copy, place and
    load the new one (run after the drain, before the cut-over)."""
    entry = new.routing.entry
    spec = new.model(entry)
    commands: list[Command] = []
    for worker_id in _entry_hosts(state, new, replaced, now):
        group = reload_group(entry, worker_id)
        unload = ControlCommand(action="unload", model_id=entry, reason=Reason.MANIFEST_SWAP, manifest_version=version)
        commands.append(Control(worker_id, unload, tier=Tier.UNLOADED, group=group))
        commands.extend(place(spec, worker_id, version, Reason.MANIFEST_SWAP, group, cause=cause, now=now))
    return commands


def restore_entry(
    state: ControlState, old: Manifest, new: Manifest, replaced: tuple[str, ...], now: datetime, cause: str
) -> list[Command]:
    """Undo ``reload_entry``: the old entry model placed and loaded again where it was reloaded."""
    entry = new.routing.entry
    if entry not in old.model_ids:
        return []
    spec = old.model(entry)
    version = state.cluster.manifest_version
    commands: list[Command] = []
    for worker_id in _entry_hosts(state, new, replaced, now):
        group = f"restore:{entry}@{worker_id}"
        reason = Reason.MANIFEST_SWAP_ABORTED
        commands.extend(place(spec, worker_id, version, reason, group, cause=f"{cause}/restore", now=now))
    return commands


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
    """Unload dropped and replaced models (but not the copies reloaded before the cut-over); move
    kept models whose declared tier changed."""
    commands: list[Command] = []
    version = plan.to_version
    for model_id in (*plan.removed, *plan.replaced):
        model = state.cluster.models.get(model_id)
        for worker_id in sorted(model.placements if model is not None else {}):
            if (model_id, worker_id) in plan.reloaded:
                continue
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
