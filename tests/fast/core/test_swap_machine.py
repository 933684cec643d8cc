"""The drained manifest swap as a pure state machine: given the log, when a trigger comes, then
these commands and this phase. No server: the log is a list of events folded into the view."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from cluster_helpers import GB, T0, applied, at, joined, manifest, manifest_text, placed, router_host, view
from nrt.core.events import (
    DrainCompleted,
    DrainStarted,
    Event,
    ManifestApplied,
    ModelPlaced,
    RequestAdmitted,
    RequestCompleted,
    TierChanged,
    WorkerJoined,
)
from nrt.core.manifest import Manifest, parse_manifest
from nrt.core.policies import (
    Command,
    Control,
    ControlState,
    Emit,
    GroupRan,
    Swap,
    SwapPhase,
    SwapStep,
    SwapTrigger,
    Tick,
    absorb,
    advance_swap,
    decide,
    start_swap,
)
from nrt.core.vocabulary import ApplyOutcome, DrainOutcome, Reason, Tier

FAST_DRAIN = (
    "lru: {idle_threshold: 60s, min_lifetime: 30s, sweep_interval: 10s}\ndrain: {timeout: 1s, admission_wait: 1s}"
)
LEGAL = "    - id: legal\n      source: /models/legal\n      tier: standby\n      footprint: 1GB\n      co_activation: router\n"
CONTRACTS = "    - id: contracts\n      source: /models/contracts\n      tier: standby\n      footprint: 1GB\n"
BROKEN = "    - id: broken\n      source: /nonexistent/export\n      tier: standby\n      footprint: 1GB\n"


def v1(**kwargs: str | None) -> Manifest:
    return manifest(**kwargs)


def v2(text: str) -> Manifest:
    return parse_manifest(text, "v2.yaml")


def running_v1(m: Manifest, *, requests: int = 0) -> list[Event]:
    """The log of a cluster serving ``m`` on w1, with ``requests`` admitted under v1 and still running."""
    joined = WorkerJoined(occurred_at=T0, worker_id="w1", host="w1", cpu_count=2, ram_bytes=16 * GB)
    log: list[Event] = [applied(m), joined]
    for spec in m.models:
        log += placed(spec.id, "w1", spec.tier)
    log += [admitted(f"q{i}") for i in range(requests)]
    return log


def admitted(request_id: str) -> RequestAdmitted:
    return RequestAdmitted(occurred_at=T0, request_id=request_id, manifest_version=1, model_id="router")


def completed(request_id: str, seconds: float) -> RequestCompleted:
    return RequestCompleted(
        occurred_at=at(seconds),
        request_id=request_id,
        manifest_version=1,
        model_id="billing",
        prompt_tokens=1,
        completion_tokens=1,
        latency_ms=1.0,
    )


def given(log: Iterable[Event], now: float = 0.0) -> ControlState:
    return view(log, now=at(now), heartbeats=["w1"])


def also(state: ControlState, *events: Event) -> ControlState:
    """The view once the log holds ``events`` too (as the recorder folds them)."""
    for event in events:
        state = absorb(state, event, event.occurred_at)
    return state


def when(swap: Swap, state: ControlState, trigger: SwapTrigger, seconds: float) -> SwapStep:
    return advance_swap(swap, state, trigger, at(seconds))


def ok(group: str, commands: Sequence[Command] = ()) -> GroupRan:
    """``group`` ran: every event among ``commands`` in that group was published."""
    return GroupRan(group, True, tuple(c.event.event_id for c in commands if isinstance(c, Emit) and c.group == group))


def emitted(commands: Sequence[Command]) -> list[Event]:
    return [c.event for c in commands if isinstance(c, Emit)]


def controls(commands: Sequence[Command]) -> list[tuple[str, str, str, str]]:
    return [
        (c.command.action, c.command.model_id, c.worker_id, c.command.reason)
        for c in commands
        if isinstance(c, Control)
    ]


# -- the happy path ---------------------------------------------------------------------------------


def test_a_swap_warms_drains_cuts_over_then_unloads_what_it_dropped() -> None:
    old = v1(gpu="4GB")
    new = v2(manifest_text(gpu="4GB").replace(LEGAL, CONTRACTS))  # adds contracts, drops legal
    state = given(running_v1(old, requests=1))

    # when the swap starts: contracts is placed and loaded beside the v1 models
    start = start_swap(state, old, new, T0)
    swap = start.swap
    assert (swap.phase, swap.from_version, swap.to_version) == (SwapPhase.WARMING, 1, 2)
    [placement] = emitted(start.commands)
    assert isinstance(placement, ModelPlaced)
    assert (placement.model_id, placement.worker_id, placement.manifest_version) == ("contracts", "w1", 2)
    assert placement.occurred_at == T0
    assert controls(start.commands) == [("load", "contracts", "w1", Reason.MANIFEST_SWAP)]

    # when the warm-up ran: the drain starts, counting the request still running under v1
    step = when(swap, state, ok("warm:contracts", start.commands), 0.5)
    [drain] = emitted(step.commands)
    assert isinstance(drain, DrainStarted)
    assert (drain.from_version, drain.to_version, drain.in_flight, drain.timeout_s) == (1, 2, 1, 30.0)
    assert step.swap.phase is SwapPhase.DRAINING

    # given the log shows the drain, the request still holds the swap open
    state = also(state, drain)
    step = when(step.swap, state, Tick(), 0.6)
    assert (step.swap.phase, step.commands) == (SwapPhase.DRAINING, ())
    step = when(step.swap, state, Tick(), 2.0)
    assert (step.swap.phase, step.commands) == (SwapPhase.DRAINING, ())

    # given the request completed: cut over, ManifestApplied then DrainCompleted in one group
    state = also(state, completed("q0", 2.4))
    step = when(step.swap, state, Tick(), 2.5)
    assert step.swap.phase is SwapPhase.CUTTING_OVER
    cut, done = emitted(step.commands)
    assert isinstance(cut, ManifestApplied)
    assert (cut.version, cut.digest, cut.text) == (2, new.digest, new.text)
    assert isinstance(done, DrainCompleted)
    assert (done.outcome, done.waited_ms, done.abandoned) == (DrainOutcome.DRAINED, 2000.0, 0)
    assert {c.group for c in step.commands} == {"swap:cutover"}

    # when both were published, the swap waits for the log to show v2 before cleaning up
    step = when(step.swap, state, ok("swap:cutover", step.commands), 2.6)
    assert (step.swap.phase, step.commands) == (SwapPhase.CUTTING_OVER, ())
    state = also(state, cut, done)
    step = when(step.swap, state, Tick(), 2.7)
    assert step.swap.phase is SwapPhase.DONE
    assert controls(step.commands) == [("unload", "legal", "w1", Reason.MANIFEST_SWAP)]
    result = step.swap.result
    assert result is not None
    assert (result.outcome, result.from_version, result.to_version) == (ApplyOutcome.APPLIED, 1, 2)
    assert (result.warmed, result.drained_ms, result.abandoned) == (("contracts",), 2000.0, 0)

    # a finished swap ignores anything that still comes
    assert when(step.swap, state, Tick(), 3.0) == SwapStep(step.swap)


def test_a_request_admitted_just_before_the_gateway_saw_the_drain_is_waited_for() -> None:
    old = v1(gpu="4GB")
    new = v2(manifest_text(gpu="4GB", legal_tier="resident"))  # legal moves to resident
    state = given(running_v1(old))
    step = start_swap(state, old, new, T0)
    assert step.swap.plan is not None
    assert step.swap.plan.retiered == ("legal",)
    assert step.swap.phase is SwapPhase.DRAINING  # nothing to warm: the drain starts at once
    [drain] = emitted(step.commands)
    assert isinstance(drain, DrainStarted)
    assert drain.in_flight == 0
    step = when(step.swap, state, Tick(), 0.3)  # the log does not show the drain yet: the gateway may admit
    assert (step.swap.phase, step.commands) == (SwapPhase.DRAINING, ())
    state = also(state, drain)
    step = when(step.swap, state, Tick(), 0.35)  # nothing in flight, but admissions may still be on their way
    assert (step.swap.phase, step.commands) == (SwapPhase.DRAINING, ())
    state = also(state, admitted("late"))  # recorded just after DrainStarted
    step = when(step.swap, state, Tick(), 0.6)
    assert (step.swap.phase, step.commands) == (SwapPhase.DRAINING, ())
    state = also(state, completed("late", 0.7))
    step = when(step.swap, state, Tick(), 0.75)
    assert step.swap.phase is SwapPhase.CUTTING_OVER
    cut, done = emitted(step.commands)
    step = when(step.swap, state, ok("swap:cutover", step.commands), 0.8)
    state = also(state, cut, done)
    step = when(step.swap, state, Tick(), 0.85)
    assert step.swap.phase is SwapPhase.DONE
    assert controls(step.commands) == [("promote", "legal", "w1", Reason.MANIFEST_SWAP)]  # re-tiered after


# -- a drain that times out -------------------------------------------------------------------------


def test_a_drain_that_outlasts_its_timeout_cuts_over_and_counts_the_abandoned() -> None:
    old = v1(lru=FAST_DRAIN)
    new = v2(manifest_text(lru=FAST_DRAIN).replace(LEGAL, ""))
    state = given(running_v1(old, requests=2))
    step = start_swap(state, old, new, T0)
    assert step.swap.phase is SwapPhase.DRAINING
    [drain] = emitted(step.commands)
    assert isinstance(drain, DrainStarted)
    assert drain.in_flight == 2
    state = also(state, drain)
    step = when(step.swap, state, Tick(), 0.5)
    assert step.swap.phase is SwapPhase.DRAINING
    state = also(state, completed("q0", 0.7))  # one finishes, one does not
    step = when(step.swap, state, Tick(), 0.999)
    assert step.swap.phase is SwapPhase.DRAINING
    step = when(step.swap, state, Tick(), 1.0)
    assert step.swap.phase is SwapPhase.CUTTING_OVER
    cut, done = emitted(step.commands)
    assert isinstance(cut, ManifestApplied)
    assert isinstance(done, DrainCompleted)
    assert (done.outcome, done.abandoned, done.waited_ms) == (DrainOutcome.TIMED_OUT, 1, 1000.0)
    step = when(step.swap, state, ok("swap:cutover", step.commands), 1.1)
    state = also(state, cut, done)
    step = when(step.swap, state, Tick(), 1.2)
    assert step.swap.phase is SwapPhase.DONE
    assert controls(step.commands) == [("unload", "legal", "w1", Reason.MANIFEST_SWAP)]
    assert step.swap.result is not None
    assert (step.swap.result.abandoned, step.swap.result.drained_ms) == (1, 1000.0)


# -- failures ---------------------------------------------------------------------------------------


def test_a_warm_up_that_fails_is_undone_and_the_old_manifest_keeps_serving() -> None:
    old = v1()
    new = v2(manifest_text(extra=CONTRACTS + BROKEN))
    state = given(running_v1(old))
    start = start_swap(state, old, new, T0)
    assert start.swap.phase is SwapPhase.WARMING
    assert sorted(c for _, c, _, _ in controls(start.commands)) == ["broken", "contracts"]

    # when one warm-up fails while the other still runs: nothing yet (an unload would race the load)
    failed = GroupRan("warm:broken", False, error="no model.onnx in /nonexistent/export", status=400)
    step = when(start.swap, state, failed, 0.2)
    assert (step.swap.phase, step.commands) == (SwapPhase.WARMING, ())

    # when the other one has run too: undo both, no drain, a 400 naming the model
    step = when(step.swap, state, ok("warm:contracts", start.commands), 0.4)
    assert step.swap.phase is SwapPhase.ABORTED
    assert emitted(step.commands) == []
    assert sorted(controls(step.commands)) == [
        ("unload", "broken", "w1", Reason.MANIFEST_SWAP_ABORTED),
        ("unload", "contracts", "w1", Reason.MANIFEST_SWAP_ABORTED),
    ]
    failure = step.swap.failure
    assert failure is not None
    assert (failure.code, failure.status) == ("swap_failed", 400)
    assert failure.message == (
        "could not load broken for manifest v2: no model.onnx in /nonexistent/export; manifest v1 is still serving"
    )


def test_a_cut_over_that_cannot_be_sent_ends_the_drain_as_aborted_and_undoes_the_warm_up() -> None:
    old = v1()
    new = v2(manifest_text(extra=CONTRACTS))
    state = given(running_v1(old))
    start = start_swap(state, old, new, T0)
    step = when(start.swap, state, ok("warm:contracts", start.commands), 0.1)
    state = also(state, *emitted(step.commands))
    step = when(step.swap, state, Tick(), 0.2)  # the log shows the drain
    step = when(step.swap, state, Tick(), 0.4)  # and nothing was admitted since
    assert step.swap.phase is SwapPhase.CUTTING_OVER
    step = when(step.swap, state, GroupRan("swap:cutover", False, error="no response from JetStream"), 0.5)
    assert step.swap.phase is SwapPhase.ABORTED
    [aborted] = emitted(step.commands)
    assert isinstance(aborted, DrainCompleted)
    assert (aborted.outcome, aborted.from_version, aborted.to_version) == (DrainOutcome.ABORTED, 1, 2)
    assert controls(step.commands) == [("unload", "contracts", "w1", Reason.MANIFEST_SWAP_ABORTED)]
    assert step.swap.failure is not None
    assert step.swap.failure.message == (
        "the cut-over failed (no response from JetStream); manifest v1 is still serving"
    )


def test_a_manifest_that_does_not_fit_is_refused_before_anything_changes() -> None:
    old = v1()
    huge = "    - id: huge\n      source: /models/huge\n      tier: standby\n      footprint: 20GB\n"
    new = v2(manifest_text(ram="30GB", extra=huge))
    step = start_swap(given(running_v1(old)), old, new, T0)
    assert (step.swap.phase, step.commands) == (SwapPhase.ABORTED, ())
    assert step.swap.failure is not None
    assert (step.swap.failure.code, step.swap.failure.status) == ("manifest_does_not_fit", 422)
    assert "cannot place huge (standby, 20 GB): w1 has" in step.swap.failure.message


# -- swaps that change little ----------------------------------------------------------------------


def test_a_swap_that_changes_nothing_is_done_at_once() -> None:
    old = v1()
    step = start_swap(given(running_v1(old, requests=1)), old, v2(old.text), T0)
    assert (step.swap.phase, step.commands) == (SwapPhase.DONE, ())
    assert step.swap.result is not None
    assert (step.swap.result.outcome, step.swap.result.from_version, step.swap.result.to_version) == (
        ApplyOutcome.UNCHANGED,
        1,
        1,
    )


def test_a_swap_that_replaces_a_models_source_unloads_it_after_the_cut_over_and_places_the_new_one() -> None:
    old = v1()
    new = v2(manifest_text().replace("source: /models/billing", "source: /models/billing-v2"))
    state = given(running_v1(old))
    step = start_swap(state, old, new, T0)
    plan = step.swap.plan
    assert plan is not None
    assert (plan.added, plan.removed, plan.replaced) == ((), (), ("billing",))
    assert step.swap.phase is SwapPhase.DRAINING  # the old billing serves until the cut-over
    state = also(state, *emitted(step.commands))
    step = when(step.swap, state, Tick(), 0.1)
    step = when(step.swap, state, Tick(), 0.3)
    cut, done = emitted(step.commands)
    step = when(step.swap, state, ok("swap:cutover", step.commands), 0.3)
    state = also(state, cut, done)
    step = when(step.swap, state, Tick(), 0.4)
    assert step.swap.phase is SwapPhase.DONE
    assert controls(step.commands) == [("unload", "billing", "w1", Reason.MANIFEST_SWAP)]

    # then, once the log shows the old copy gone, placement loads billing from its new source
    gone = TierChanged(
        occurred_at=at(0.5),
        model_id="billing",
        worker_id="w1",
        from_tier=Tier.RESIDENT,
        to_tier=Tier.UNLOADED,
        reason=Reason.MANIFEST_SWAP,
        elapsed_ms=1.0,
        bytes_held=0,
    )
    state = also(state, gone)
    loads = [c for c in decide(state, new, Tick(), at(0.6)) if isinstance(c, Control)]
    assert [(c.command.model_id, c.command.source, c.command.tier) for c in loads] == [
        ("billing", "/models/billing-v2", Tier.RESIDENT)
    ]


def test_a_first_manifest_is_warmed_then_applied_without_a_drain() -> None:
    first = v1()
    joined = WorkerJoined(occurred_at=T0, worker_id="w1", host="w1", cpu_count=2, ram_bytes=16 * GB)
    state = view([joined, router_host("r1")], now=T0, heartbeats=["w1", "r1"])
    start = start_swap(state, None, first, T0)
    assert (start.swap.from_version, start.swap.to_version) == (0, 1)
    assert sorted((c, w) for _, c, w, _ in controls(start.commands)) == [
        ("billing", "w1"),
        ("legal", "w1"),
        ("router", "r1"),  # the entry model on the router host
        ("technical", "w1"),
    ]
    step = start
    for group in sorted({c.group for c in start.commands}):
        step = when(step.swap, state, ok(group, start.commands), 0.5)
    [cut] = emitted(step.commands)
    assert isinstance(cut, ManifestApplied)
    assert cut.version == 1
    step = when(step.swap, state, ok("swap:cutover", step.commands), 0.6)
    assert step.swap.phase is SwapPhase.DONE
    assert step.swap.result is not None
    assert step.swap.result.warmed == ("router", "billing", "technical", "legal")


# -- a router change -------------------------------------------------------------------------------


def serving_v1_with_a_router_host(m: Manifest, *, requests: int = 0) -> list[Event]:
    """The log of a cluster serving ``m``: the entry model on router host r1, the specialists on w1."""
    log: list[Event] = [applied(m), joined("w1"), router_host("r1")]
    for spec in m.models:
        log += placed(spec.id, "r1" if spec.id == m.routing.entry else "w1", spec.tier)
    return log + [admitted(f"q{i}") for i in range(requests)]


def test_a_router_change_is_drained_then_reloaded_on_its_router_host_before_the_cut_over() -> None:
    old = v1()
    new = v2(manifest_text().replace("source: /models/router", "source: /models/router-v2"))
    state = view(serving_v1_with_a_router_host(old, requests=1), now=T0, heartbeats=["w1", "r1"])

    # the new router cannot load beside the old one on r1 (one copy per model id): nothing to warm
    start = start_swap(state, old, new, T0)
    plan = start.swap.plan
    assert plan is not None
    assert plan.replaced == ("router",)
    assert start.swap.phase is SwapPhase.DRAINING
    [drain] = emitted(start.commands)
    assert isinstance(drain, DrainStarted)
    state = also(state, drain)

    # the old router serves the request admitted under v1 until it is done
    step = when(start.swap, state, Tick(), 0.3)
    assert (step.swap.phase, step.commands) == (SwapPhase.DRAINING, ())
    state = also(state, completed("q0", 0.4))
    step = when(step.swap, state, Tick(), 0.5)

    # drained: r1 reloads the router from its new source while new requests are still held
    assert step.swap.phase is SwapPhase.RELOADING
    assert controls(step.commands) == [
        ("unload", "router", "r1", Reason.MANIFEST_SWAP),
        ("load", "router", "r1", Reason.MANIFEST_SWAP),
    ]
    [placement] = emitted(step.commands)
    assert isinstance(placement, ModelPlaced)
    assert (placement.model_id, placement.worker_id, placement.artifact, placement.manifest_version) == (
        "router",
        "r1",
        "/models/router-v2",
        2,
    )
    load = next(c for c in step.commands if isinstance(c, Control) and c.command.action == "load")
    assert (load.command.source, load.command.tier) == ("/models/router-v2", Tier.RESIDENT)
    assert {c.group for c in step.commands} == {"reload:router@r1"}  # in order: unload, place, load

    # reloaded: the cut-over; afterwards nothing is unloaded (the router on r1 is v2's already)
    step = when(step.swap, state, ok("reload:router@r1", step.commands), 0.8)
    assert step.swap.phase is SwapPhase.CUTTING_OVER
    cut, done = emitted(step.commands)
    assert isinstance(cut, ManifestApplied)
    assert isinstance(done, DrainCompleted)
    assert (done.outcome, done.waited_ms) == (DrainOutcome.DRAINED, 500.0)  # the drain's wait, not the reload's
    step = when(step.swap, state, ok("swap:cutover", step.commands), 0.9)
    state = also(state, cut, done)
    step = when(step.swap, state, Tick(), 1.0)
    assert step.swap.phase is SwapPhase.DONE
    assert controls(step.commands) == []
    assert step.swap.result is not None
    assert step.swap.result.warmed == ("router",)


def test_a_router_that_cannot_be_reloaded_aborts_the_swap_and_loads_the_old_one_again() -> None:
    old = v1()
    new = v2(manifest_text().replace("source: /models/router", "source: /nonexistent/router"))
    state = view(serving_v1_with_a_router_host(old), now=T0, heartbeats=["w1", "r1"])
    start = start_swap(state, old, new, T0)
    state = also(state, *emitted(start.commands))
    step = when(start.swap, state, Tick(), 0.1)
    step = when(step.swap, state, Tick(), 0.3)
    assert step.swap.phase is SwapPhase.RELOADING
    failed = GroupRan("reload:router@r1", False, (), "source '/nonexistent/router' is not an ONNX export", 400)
    step = when(step.swap, state, failed, 0.5)
    assert step.swap.phase is SwapPhase.ABORTED
    [aborted] = [e for e in emitted(step.commands) if isinstance(e, DrainCompleted)]
    assert aborted.outcome is DrainOutcome.ABORTED
    assert step.swap.failure is not None
    assert step.swap.failure.status == 400  # the new manifest's source does not load
    assert step.swap.failure.message == (
        "could not reload router@r1 for manifest v2 (source '/nonexistent/router' is not an ONNX export); "
        "manifest v1 is still serving"
    )
    # the old router is placed and loaded again on r1, under v1
    [back] = [e for e in emitted(step.commands) if isinstance(e, ModelPlaced)]
    assert (back.model_id, back.worker_id, back.artifact, back.manifest_version) == (
        "router",
        "r1",
        "/models/router",
        1,
    )
    assert controls(step.commands) == [("load", "router", "r1", Reason.MANIFEST_SWAP_ABORTED)]
    reloading = when(when(start.swap, state, Tick(), 0.1).swap, state, Tick(), 0.3)
    [reload_placed] = [e for e in emitted(reloading.commands) if isinstance(e, ModelPlaced)]
    assert back.event_id != reload_placed.event_id  # a fact of its own in the log
