"""The drained manifest swap as a pure state machine: phases, triggers, commands.

``start_swap(view, old, new, now)`` validates and plans; ``advance_swap(swap, view, trigger,
now)`` moves it on. Each returns a ``SwapStep``: the swap after the trigger and the commands
the shell runs next. The shell executes them, feeds back how each group of commands ran
(``GroupRan``) and ticks (``Tick``) while it waits; ``view`` is the controller's view of the
log at that moment. No I/O and no clock: timings are differences of the ``now`` it is given,
and its events carry ids derived from the swap's cause.

    warming ──every warm-up group ran──▶ draining ──the old version's requests are done,
       │                                    │          or drain.timeout──▶ (reloading) ──▶ cutting over
       │ a warm-up failed                   │ DrainStarted not sent   │ a reload failed: │ ManifestApplied not sent
       │                                    │                         │ restore the old  │
       ▼                                    ▼                         ▼                  ▼
    aborted: undo the warm-up        aborted: DrainCompleted aborted, undo the warm-up
                                                          cutting over ──the log shows v+1──▶ done

- warming: the added models are placed and loaded beside the old ones (``SwapPlan.warm``);
  once every group has run, a failure anywhere undoes them all (the old manifest serves on);
- draining: ``DrainStarted``; the gateway holds new requests; the swap waits until the log
  shows the drain, ``ADMISSION_SETTLE_S`` more (requests admitted just before the gateway saw
  it get recorded), and no request admitted under the old version is in flight with a live
  owner (``nrt.core.policies.owners``), or until ``drain.timeout`` has passed (those still running
  are abandoned);
- reloading (a router change only): the replaced entry model is unloaded and loaded anew on
  each router host that holds it (``SwapPlan.reload``), while new requests are still held;
  a failure aborts the swap and loads the old router again there (``SwapPlan.restore``);
- cutting over: ``ManifestApplied`` v+1, then ``DrainCompleted``; once the log shows v+1, the
  models the new manifest drops or replaces are unloaded and re-tiered ones moved
  (``after_cutover``) and the swap is done. A first manifest (v0 -> v1) has no drain.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum

from nrt.core.events import DrainCompleted, DrainStarted, ManifestApplied, derived_event_id
from nrt.core.manifest import Manifest
from nrt.core.policies.model import Command, ControlState, Emit, Tick
from nrt.core.policies.owners import held_under
from nrt.core.policies.swap import (
    RELOAD_PREFIX,
    WARM_PREFIX,
    SwapPlan,
    SwapRejected,
    after_cutover,
    plan_swap,
    undo_warm,
)
from nrt.core.protocol import ApplyResult
from nrt.core.vocabulary import ApplyOutcome, DrainOutcome

ADMISSION_SETTLE_S = 0.2  # requests admitted just before the gateway saw DrainStarted get this long to be recorded
LOG_WAIT_S = 30.0  # how long the cut-over may take to show in the log
DRAIN_GROUP = "swap:drain"
CUTOVER_GROUP = "swap:cutover"
ABORT_GROUP = "swap:aborted"


class SwapPhase(StrEnum):
    WARMING = "warming"
    DRAINING = "draining"
    RELOADING = "reloading"
    CUTTING_OVER = "cutting_over"
    DONE = "done"
    ABORTED = "aborted"


@dataclass(frozen=True, slots=True)
class SwapFailure:
    """Why a swap did not happen (or did not finish), for the caller: an error code, a message, a status."""

    code: str  # "manifest_does_not_fit" | "swap_failed"
    message: str
    status: int


@dataclass(frozen=True, slots=True)
class GroupRan:
    """The shell ran one group of the swap's commands (in order, stopping at the first failure)."""

    group: str
    ok: bool
    published: tuple[str, ...] = ()  # ids of the events it published
    error: str = ""  # what failed, when not ok
    status: int = 503  # the failure's status: a 4xx is the manifest's fault (a source that does not load)


SwapTrigger = GroupRan | Tick


@dataclass(frozen=True, slots=True)
class Swap:
    """One manifest swap and how far it got. Immutable: ``advance_swap`` returns the next one."""

    manifest: Manifest  # the manifest being applied
    from_version: int
    to_version: int
    cause: str  # what the ids of its events derive from
    started_at: datetime
    phase: SwapPhase
    plan: SwapPlan | None = None  # None: nothing to do (unchanged) or it does not fit
    warming: frozenset[str] = frozenset()  # warm-up groups still running
    warm_failure: GroupRan | None = None  # the first warm-up group that failed
    reloading: frozenset[str] = frozenset()  # reload groups still running
    drain_started_at: datetime | None = None
    drain_seen_at: datetime | None = None  # when the log first showed the drain
    outcome: DrainOutcome | None = None
    waited_ms: float = 0.0
    abandoned: int = 0
    cut_at: datetime | None = None
    applied: bool = False  # ManifestApplied is sent: cutting over waits for the log to show it
    result: ApplyResult | None = None  # done: what the caller gets
    failure: SwapFailure | None = None  # aborted: why

    @property
    def finished(self) -> bool:
        return self.phase in (SwapPhase.DONE, SwapPhase.ABORTED)

    def event_id(self, event_type: str) -> str:
        return derived_event_id(self.cause, event_type)


@dataclass(frozen=True, slots=True)
class SwapStep:
    swap: Swap
    commands: tuple[Command, ...] = ()


def swap_cause(from_version: int, new: Manifest, now: datetime) -> str:
    """One swap request: the version it starts from, the manifest it applies, the time it came."""
    return f"swap:v{from_version}:{new.digest}@{now.isoformat()}"


def start_swap(view: ControlState, old: Manifest | None, new: Manifest, now: datetime) -> SwapStep:
    """Validate and plan the swap from the manifest in force (``old``) to ``new``; start warming."""
    cluster = view.cluster
    from_version = cluster.manifest_version
    cause = swap_cause(from_version, new, now)
    if cluster.manifest_text is not None and new.digest == cluster.manifest_digest:
        result = ApplyResult(
            from_version=from_version, to_version=from_version, outcome=ApplyOutcome.UNCHANGED, drained_ms=0.0
        )
        return SwapStep(Swap(new, from_version, from_version, cause, now, SwapPhase.DONE, result=result))
    plan = plan_swap(view, old, new, now, cause)
    if isinstance(plan, SwapRejected):
        failure = SwapFailure("manifest_does_not_fit", plan.message, 422)
        return SwapStep(Swap(new, from_version, from_version + 1, cause, now, SwapPhase.ABORTED, failure=failure))
    groups = frozenset(c.group for c in plan.warm)
    swap = Swap(new, plan.from_version, plan.to_version, cause, now, SwapPhase.WARMING, plan=plan, warming=groups)
    if not groups:
        return _warmed(swap, view, now)
    return SwapStep(swap, plan.warm)


def advance_swap(swap: Swap, view: ControlState, trigger: SwapTrigger, now: datetime) -> SwapStep:
    """The swap after ``trigger``, with the commands to run next."""
    if swap.finished:
        return SwapStep(swap)
    if isinstance(trigger, GroupRan):
        return _ran(swap, view, trigger, now)
    return _tick(swap, view, now)


# -- groups that ran --------------------------------------------------------------------------------


def _ran(swap: Swap, view: ControlState, ran: GroupRan, now: datetime) -> SwapStep:
    if swap.phase is SwapPhase.WARMING and ran.group in swap.warming:
        failure = swap.warm_failure or (None if ran.ok else ran)
        swap = replace(swap, warming=swap.warming - {ran.group}, warm_failure=failure)
        if swap.warming:
            return SwapStep(swap)
        if swap.warm_failure is not None:
            return _abort_warm_up(swap, swap.warm_failure)
        return _warmed(swap, view, now)
    if swap.phase is SwapPhase.DRAINING and ran.group == DRAIN_GROUP and not ran.ok:
        return _abort(swap, now, f"the drain could not start ({ran.error})")
    if swap.phase is SwapPhase.RELOADING and ran.group in swap.reloading:
        if not ran.ok:
            where = ran.group.removeprefix(RELOAD_PREFIX)
            status = ran.status if 400 <= ran.status < 500 else 503  # a 4xx: the new source does not load
            why = f"could not reload {where} for manifest v{swap.to_version} ({ran.error})"
            return _abort(swap, now, why, status)
        swap = replace(swap, reloading=swap.reloading - {ran.group})
        return SwapStep(swap) if swap.reloading else _cut_over(swap, now)
    if swap.phase is SwapPhase.CUTTING_OVER and ran.group == CUTOVER_GROUP:
        if swap.event_id(ManifestApplied.__name__) not in ran.published:
            return _abort(swap, now, f"the cut-over failed ({ran.error})")
        swap = replace(swap, applied=True)
        if swap.from_version == 0:  # a first manifest: nothing was served before, nothing to clean up
            return SwapStep(replace(swap, phase=SwapPhase.DONE, result=_applied(swap)))
        return _tick(swap, view, now)
    return SwapStep(swap)


def _warmed(swap: Swap, view: ControlState, now: datetime) -> SwapStep:
    """Every added model is loaded: start the drain (or, for a first manifest, apply it)."""
    if swap.from_version == 0:
        applied = _manifest_applied(swap, now)
        return SwapStep(replace(swap, phase=SwapPhase.CUTTING_OVER, cut_at=now), (Emit(applied, CUTOVER_GROUP),))
    started = DrainStarted(
        event_id=swap.event_id(DrainStarted.__name__),
        occurred_at=now,
        from_version=swap.from_version,
        to_version=swap.to_version,
        in_flight=held_under(view, swap.from_version, now),
        timeout_s=swap.manifest.drain.timeout,
    )
    swap = replace(swap, phase=SwapPhase.DRAINING, drain_started_at=now)
    return SwapStep(swap, (Emit(started, DRAIN_GROUP),))


# -- time passing, the log moving -------------------------------------------------------------------


def _tick(swap: Swap, view: ControlState, now: datetime) -> SwapStep:
    if swap.phase is SwapPhase.DRAINING:
        return _drain(swap, view, now)
    if swap.phase is SwapPhase.CUTTING_OVER and swap.applied:
        return _follow_cutover(swap, view, now)
    return SwapStep(swap)


def _drain(swap: Swap, view: ControlState, now: datetime) -> SwapStep:
    cluster = view.cluster
    seen = swap.drain_seen_at
    if seen is None and cluster.draining and cluster.drain_to_version == swap.to_version:
        seen = now
    swap = replace(swap, drain_seen_at=seen)
    left = held_under(view, swap.from_version, now)  # a request whose gateway is gone holds no one up
    settled = seen is not None and _seconds(seen, now) >= ADMISSION_SETTLE_S
    if settled and left == 0:
        return _drained(swap, now, DrainOutcome.DRAINED, 0)
    if _seconds(swap.drain_started_at or now, now) >= swap.manifest.drain.timeout:
        return _drained(swap, now, DrainOutcome.DRAINED if left == 0 else DrainOutcome.TIMED_OUT, left)
    return SwapStep(swap)


def _drained(swap: Swap, now: datetime, outcome: DrainOutcome, abandoned: int) -> SwapStep:
    """The drain is over: reload a replaced entry model first (new requests are still held), then cut over."""
    waited_ms = _seconds(swap.drain_started_at or now, now) * 1e3
    swap = replace(swap, outcome=outcome, waited_ms=waited_ms, abandoned=abandoned)
    reload = swap.plan.reload if swap.plan is not None else ()
    if not reload:
        return _cut_over(swap, now)
    groups = frozenset(c.group for c in reload)
    return SwapStep(replace(swap, phase=SwapPhase.RELOADING, reloading=groups), reload)


def _cut_over(swap: Swap, now: datetime) -> SwapStep:
    outcome = swap.outcome or DrainOutcome.DRAINED  # set when the drain ended
    swap = replace(swap, phase=SwapPhase.CUTTING_OVER, cut_at=now)
    completed = _drain_completed(swap, now, outcome)
    # one group: DrainCompleted only follows a ManifestApplied that was sent
    return SwapStep(swap, (Emit(_manifest_applied(swap, now), CUTOVER_GROUP), Emit(completed, CUTOVER_GROUP)))


def _follow_cutover(swap: Swap, view: ControlState, now: datetime) -> SwapStep:
    """ManifestApplied is sent: once the log shows it, clean up after the old manifest."""
    if view.cluster.manifest_version >= swap.to_version and swap.plan is not None:
        cleanup = after_cutover(view, swap.manifest, swap.plan, now)
        return SwapStep(replace(swap, phase=SwapPhase.DONE, result=_applied(swap)), tuple(cleanup))
    if _seconds(swap.cut_at or now, now) >= LOG_WAIT_S:
        message = (
            f"manifest v{swap.to_version} was sent but the log did not show it within {LOG_WAIT_S:.0f}s; "
            "the models it drops were not unloaded"
        )
        return SwapStep(replace(swap, phase=SwapPhase.ABORTED, failure=SwapFailure("swap_failed", message, 503)))
    return SwapStep(swap)


# -- failures ---------------------------------------------------------------------------------------


def _abort_warm_up(swap: Swap, failed: GroupRan) -> SwapStep:
    """A warm-up failed: unload what was warmed; nothing else has changed."""
    model = failed.group.removeprefix(WARM_PREFIX)
    status = failed.status if 400 <= failed.status < 500 else 503
    message = (
        f"could not load {model} for manifest v{swap.to_version}: {failed.error}; "
        f"manifest v{swap.from_version} is still serving"
    )
    undo = tuple(undo_warm(swap.plan)) if swap.plan is not None else ()
    aborted = replace(swap, phase=SwapPhase.ABORTED, failure=SwapFailure("swap_failed", message, status))
    return SwapStep(aborted, undo)


def _abort(swap: Swap, now: datetime, why: str, status: int = 503) -> SwapStep:
    """The cut-over did not happen: end the drain (if one began) as aborted, undo the warm-up."""
    commands: list[Command] = []
    if swap.drain_started_at is not None:
        if swap.outcome is None:  # still draining: the wait ends now
            swap = replace(swap, waited_ms=_seconds(swap.drain_started_at, now) * 1e3)
        commands.append(Emit(_drain_completed(swap, now, DrainOutcome.ABORTED), ABORT_GROUP))
    commands += undo_warm(swap.plan) if swap.plan is not None else []
    if swap.phase is SwapPhase.RELOADING and swap.plan is not None:
        commands += swap.plan.restore  # the old router back where a reload was tried
    message = f"{why}; manifest v{swap.from_version} is still serving"
    aborted = replace(
        swap, phase=SwapPhase.ABORTED, outcome=DrainOutcome.ABORTED, failure=SwapFailure("swap_failed", message, status)
    )
    return SwapStep(aborted, tuple(commands))


# -- the events and the result ------------------------------------------------------------------------


def _manifest_applied(swap: Swap, now: datetime) -> ManifestApplied:
    new = swap.manifest
    return ManifestApplied(
        event_id=swap.event_id(ManifestApplied.__name__),
        occurred_at=now,
        version=swap.to_version,
        cluster=new.cluster,
        digest=new.digest,
        text=new.text,
    )


def _drain_completed(swap: Swap, now: datetime, outcome: DrainOutcome) -> DrainCompleted:
    return DrainCompleted(
        event_id=swap.event_id(DrainCompleted.__name__),  # one per swap: completed or aborted
        occurred_at=now,
        from_version=swap.from_version,
        to_version=swap.to_version,
        outcome=outcome,
        waited_ms=swap.waited_ms,
        abandoned=swap.abandoned,
    )


def _applied(swap: Swap) -> ApplyResult:
    return ApplyResult(
        from_version=swap.from_version,
        to_version=swap.to_version,
        outcome=ApplyOutcome.APPLIED,
        drained_ms=swap.waited_ms,
        warmed=swap.plan.warmed if swap.plan is not None else (),
        abandoned=swap.abandoned,
    )


def _seconds(since: datetime, now: datetime) -> float:
    return (now - since).total_seconds()
