"""The candidate's tiers over the recorded traffic, through the controller's own pure policies.

One simulated worker with room for everything holds every model at its declared tier, so only the
manifest's budgets bind (a deployment's workers may bind sooner). Each recorded request, in time
order, fires the entry model (co-activation and ``promotion_hint`` warming, ``co_activate``) and
reaches its target; an entry model or a target on standby is promoted on demand (a cold start,
``make_resident``, which demotes least recently used residents or refuses with the numbers).
Sessions' KV bytes are not simulated (the recorded texts carry no conversation). The events these
decisions would cause are folded with the live ``evolve``, so the next request sees their effect.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

import msgspec

from nrt.core.events import (
    Event,
    ManifestApplied,
    ModelPlaced,
    RequestCompleted,
    RequestRouted,
    TierChanged,
    WorkerJoined,
)
from nrt.core.manifest import Manifest, Tier
from nrt.core.policies.budget import budget_for, budget_key, holdings, tier_total
from nrt.core.policies.eviction import make_resident
from nrt.core.policies.model import EPOCH, Command, Control, ControlState, Refuse
from nrt.core.policies.warming import co_activate
from nrt.core.state import ClusterState, evolve, fold
from nrt.core.units import format_size
from nrt.core.vocabulary import Reason

WORKER = "what-if"  # the one simulated worker
ROOM = 1 << 60  # its memory: more than any budget
_VERSION = 1


class TierTransition(msgspec.Struct, frozen=True, kw_only=True):
    model_id: str
    from_tier: Tier
    to_tier: Tier
    reason: str  # manifest_swap (at apply) or the policy's reason (on_demand, promotion_hint, budget_pressure, ...)
    at: datetime | None = None  # None: when the candidate is applied
    request_id: str | None = None  # the request that caused it
    cold_start: bool = False  # a request waited for this promotion


class Refusal(msgspec.Struct, frozen=True, kw_only=True):
    model_id: str
    request_id: str
    at: datetime
    code: str  # budget_exhausted, not_placed, ...
    reason: str


class BudgetUse(msgspec.Struct, frozen=True, kw_only=True):
    """One tier's declared models against its budget, when the candidate is applied."""

    tier: Tier
    key: str  # gpu_budget | ram_budget
    used: int
    budget: int | None  # None: no budget declared
    models: list[str]

    @property
    def fits(self) -> bool:
        return self.budget is None or self.used <= self.budget

    def describe(self) -> str:
        limit = "no budget" if self.budget is None else f"{self.key} {format_size(self.budget)}"
        return f"{self.tier.value} models need {format_size(self.used)} ({', '.join(self.models) or 'none'}); {limit}"


class Step(msgspec.Struct, frozen=True, kw_only=True):
    """One recorded request as the candidate would route it."""

    request_id: str
    at: datetime
    intent: str | None
    target: str


class Simulation(msgspec.Struct, frozen=True, kw_only=True):
    budgets: list[BudgetUse]
    transitions: list[TierTransition]
    refusals: list[Refusal]

    @property
    def cold_starts(self) -> int:
        return sum(1 for t in self.transitions if t.cold_start)


def at_apply(current: Manifest | None, candidate: Manifest) -> list[TierTransition]:
    """The declared tier of every model that the swap from ``current`` to ``candidate`` changes."""
    before = {s.id: s.tier for s in current.models} if current is not None else {}
    after = {s.id: s.tier for s in candidate.models}
    out = []
    for model_id in dict.fromkeys((*after, *before)):
        old, new = before.get(model_id, Tier.UNLOADED), after.get(model_id, Tier.UNLOADED)
        if old != new:
            out.append(TierTransition(model_id=model_id, from_tier=old, to_tier=new, reason=Reason.MANIFEST_SWAP))
    return out


def placed(candidate: Manifest, at: datetime) -> ClusterState:
    """The cluster right after ``candidate`` is applied: every model at its declared tier on one worker."""
    events: list[Event] = [
        ManifestApplied(
            version=_VERSION, cluster=candidate.cluster, digest=candidate.digest, text=candidate.text, occurred_at=at
        ),
        WorkerJoined(
            worker_id=WORKER, host=WORKER, cpu_count=1, ram_bytes=ROOM, accelerator_bytes=ROOM, occurred_at=at
        ),
    ]
    for spec in candidate.models:
        held = 0 if spec.tier is Tier.REMOTE else spec.footprint or 0
        events.append(
            ModelPlaced(
                model_id=spec.id,
                worker_id=WORKER,
                artifact=spec.source,
                tier=spec.tier,
                manifest_version=_VERSION,
                occurred_at=at,
            )
        )
        events.append(
            TierChanged(
                model_id=spec.id,
                worker_id=WORKER,
                from_tier=Tier.UNLOADED,
                to_tier=spec.tier,
                reason=Reason.PLACEMENT,
                elapsed_ms=0.0,
                bytes_held=held,
                occurred_at=at,
            )
        )
    return fold(events)


def budgets(state: ClusterState, candidate: Manifest) -> list[BudgetUse]:
    held = holdings(ControlState(cluster=state), candidate)
    out = []
    for tier in (Tier.RESIDENT, Tier.STANDBY):
        out.append(
            BudgetUse(
                tier=tier,
                key=budget_key(tier),
                used=tier_total(held, tier),
                budget=budget_for(candidate, tier),
                models=sorted(h.model_id for h in held if h.tier == tier),
            )
        )
    return out


def simulate(current: Manifest | None, candidate: Manifest, steps: Sequence[Step]) -> Simulation:
    """``candidate`` applied before the first step (footprints filled in: ``with_footprints``), then every step."""
    start = steps[0].at if steps else EPOCH
    applied = placed(candidate, start)
    state = applied
    transitions = at_apply(current, candidate)
    refusals: list[Refusal] = []
    entry = candidate.routing.entry
    for step in steps:
        fired = RequestRouted(
            request_id=step.request_id,
            manifest_version=_VERSION,
            model_id=entry,
            worker_id=WORKER,
            intent=step.intent,
            scores={},
            confidence=1.0,
            threshold=0.0,
            target=step.target,
            rule="what-if",
            latency_ms=0.0,
            occurred_at=step.at,
        )
        control = ControlState(cluster=state, started_at=step.at)
        commands = co_activate(control, candidate, fired, step.at)
        state, done = _apply(state, commands, step)
        transitions += done
        refusals += [_refusal(c, step) for c in commands if isinstance(c, Refuse)]
        for model_id in dict.fromkeys((entry, step.target)):  # the router classifies, then the target answers
            if _tier(state, model_id) != Tier.STANDBY:
                continue
            commands = make_resident(ControlState(cluster=state), candidate, model_id, Reason.ON_DEMAND, step.at)
            state, done = _apply(state, commands, step)
            transitions += done
            refusals += [_refusal(c, step) for c in commands if isinstance(c, Refuse)]
        used = RequestCompleted(
            request_id=step.request_id,
            manifest_version=_VERSION,
            model_id=step.target,
            prompt_tokens=0,
            completion_tokens=0,
            latency_ms=0.0,
            occurred_at=step.at,
        )
        state = fold((fired, used), state)
    return Simulation(budgets=budgets(applied, candidate), transitions=transitions, refusals=refusals)


def _tier(state: ClusterState, model_id: str) -> Tier:
    model = state.models.get(model_id)
    placement = model.placements.get(WORKER) if model is not None else None
    return placement.tier if placement is not None else Tier.UNLOADED


def _apply(state: ClusterState, commands: Iterable[Command], step: Step) -> tuple[ClusterState, list[TierTransition]]:
    """Fold the tier changes the ``commands`` would cause (a refusal stops its group, as live)."""
    done: list[TierTransition] = []
    stopped: set[str] = set()
    for command in commands:
        if isinstance(command, Refuse):
            stopped.add(command.group)
            continue
        if not isinstance(command, Control) or command.tier is None or command.group in stopped:
            continue
        model_id = command.command.model_id
        before = _tier(state, model_id)
        model = state.models.get(model_id)
        placement = model.placements.get(WORKER) if model is not None else None
        held = placement.bytes_held if placement is not None else 0
        reason = command.command.reason
        cold = reason == Reason.ON_DEMAND
        change = TierChanged(
            model_id=model_id,
            worker_id=WORKER,
            from_tier=before,
            to_tier=command.tier,
            reason=reason,
            elapsed_ms=0.0,
            bytes_held=held,
            cold_start=cold,
            occurred_at=step.at,
        )
        state = evolve(state, change)
        done.append(
            TierTransition(
                model_id=model_id,
                from_tier=before,
                to_tier=command.tier,
                reason=reason,
                at=step.at,
                request_id=step.request_id,
                cold_start=cold,
            )
        )
    return state, done


def _refusal(command: Refuse, step: Step) -> Refusal:
    return Refusal(
        model_id=command.model_id, request_id=step.request_id, at=step.at, code=command.code, reason=command.reason
    )
