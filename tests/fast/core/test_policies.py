"""The pure policies, without any server: warming, session LRU, model LRU, placement, liveness, swaps."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from cluster_helpers import (
    GB,
    T0,
    applied,
    at,
    beat,
    fired,
    joined,
    manifest,
    manifest_text,
    placed,
    routed,
    router_host,
    view,
)
from nrt.core.events import SessionKvEvicted, SessionOpened, SessionTouched, TierChanged, WorkerLost
from nrt.core.manifest import ManifestError, parse_manifest
from nrt.core.policies import (
    Control,
    Emit,
    PromoteWanted,
    Refuse,
    SwapPlan,
    SwapRejected,
    Sweep,
    Tick,
    after_cutover,
    check_fit,
    decide,
    note_reply,
    note_sent,
    plan_swap,
    saw_heartbeat,
    with_footprints,
)


def _controls(commands: list) -> list[tuple[str, str, str]]:
    return [(c.command.action, c.command.model_id, c.worker_id) for c in commands if isinstance(c, Control)]


def _placed_cluster(m, worker_ram: int = 16 * GB, legal_tier: str = "standby") -> list:
    return [
        applied(m),
        joined("w1", ram=worker_ram),
        *placed("router", "w1", "resident"),
        *placed("billing", "w1", "resident"),
        *placed("technical", "w1", "resident"),
        *placed("legal", "w1", legal_tier),
    ]


# -- co-activation warming ----------------------------------------------------------------


def test_router_hit_promotes_the_standby_model_that_co_activates_on_it() -> None:
    m = manifest()
    state = view(_placed_cluster(m), heartbeats=["w1"])
    commands = decide(state, m, fired("router"), T0)
    assert _controls(commands) == [("promote", "legal", "w1")]
    promote = commands[-1]
    assert isinstance(promote, Control)
    assert promote.command.reason == "co_activation"
    assert promote.tier == "resident"


def test_a_routed_request_warms_as_a_router_hit_does() -> None:
    m = manifest()
    state = view(_placed_cluster(m), heartbeats=["w1"])
    # RequestRouted (the decision and the dispatch in one event) fires the router, as RouterFired did
    assert decide(state, m, routed("billing"), T0) == decide(state, m, fired("router"), T0)
    assert _controls(decide(state, m, routed("billing"), T0)) == [("promote", "legal", "w1")]
    assert decide(state, m, routed("billing", when=T0 - timedelta(minutes=5)), T0) == []  # stale


def test_warming_is_deduplicated_while_the_promotion_is_in_flight() -> None:
    m = manifest()
    state = view(_placed_cluster(m), heartbeats=["w1"])
    first = decide(state, m, fired("router"), T0)
    state = note_sent(state, first, T0)
    assert decide(state, m, fired("router", when=at(0.1)), at(0.1)) == []
    # the worker answered, but its TierChanged is not in the log yet: still deduplicated
    state = note_reply(state, first[-1], ok=True, now=at(0.2))
    assert decide(state, m, fired("router", when=at(0.3)), at(0.3)) == []


def test_no_warming_for_resident_models_other_routers_or_stale_events() -> None:
    m = manifest(legal_tier="resident", gpu="5GB")
    state = view(_placed_cluster(m, legal_tier="resident"), heartbeats=["w1"])
    assert decide(state, m, fired("router"), T0) == []  # legal is already resident
    m2 = manifest()
    state2 = view(_placed_cluster(m2), heartbeats=["w1"])
    assert decide(state2, m2, fired("billing"), T0) == []  # nothing co-activates on billing
    stale = fired("router", when=T0 - timedelta(minutes=5))
    assert decide(state2, m2, stale, T0) == []  # an old event from a replayed backlog


def test_promotion_hint_warms_the_dispatch_target() -> None:
    hinted = manifest(legal_co=None, legal_hint="on_router_classification")
    assert hinted.model("legal").promotion_hint == "on_router_classification"
    state = view(_placed_cluster(hinted), heartbeats=["w1"])
    assert decide(state, hinted, fired("router", intent="billing"), T0) == []
    commands = decide(state, hinted, fired("router", intent="legal"), T0)
    assert _controls(commands) == [("promote", "legal", "w1")]
    assert commands[-1].command.reason == "promotion_hint"


# -- model LRU under budget pressure ------------------------------------------------------------


def _used(model_id: str, seconds: float) -> list:
    return [fired("router", when=at(seconds)), *_completed(model_id, at(seconds))]


def _completed(model_id: str, when):
    from nrt.core.events import RequestCompleted

    return [
        RequestCompleted(
            occurred_at=when,
            request_id=f"q-{model_id}-{when.timestamp()}",
            manifest_version=1,
            model_id=model_id,
            prompt_tokens=1,
            completion_tokens=1,
            latency_ms=1.0,
        )
    ]


def test_budget_pressure_demotes_the_least_recently_used_non_critical_model_first() -> None:
    m = manifest(gpu="3GB")  # router, billing and technical fill it; legal cannot join without an eviction
    history = [*_placed_cluster(m), *_completed("technical", at(1)), *_completed("billing", at(2))]
    history += _completed("router", at(3))  # the router is the most recent, but critical anyway
    state = view(history, now=at(4), heartbeats=["w1"])
    commands = decide(state, m, fired("router", when=at(4)), at(4))
    assert _controls(commands) == [("demote", "technical", "w1"), ("promote", "legal", "w1")]
    assert {c.group for c in commands} == {"promote:legal"}  # one group: the promotion waits for the demotion
    assert commands[0].command.reason == "budget_pressure"


def test_budget_pressure_never_demotes_a_critical_model_and_says_why() -> None:
    m = manifest(gpu="3GB", billing_priority="critical", technical_priority="critical")
    state = view(_placed_cluster(m), heartbeats=["w1"])
    commands = decide(state, m, PromoteWanted(model_id="legal"), T0)
    assert _controls(commands) == []
    [refusal] = commands
    assert isinstance(refusal, Refuse)
    assert refusal.code == "budget_exhausted"
    assert "cannot make legal resident (1 GB)" in refusal.reason
    assert "residents would hold 4 GB of gpu_budget 3 GB" in refusal.reason
    assert "billing, router, technical are critical" in refusal.reason


def test_several_demotions_when_one_is_not_enough() -> None:
    text = manifest_text(gpu="3GB").replace(
        "      footprint: 1GB\n      co_activation", "      footprint: 2GB\n      co_activation"
    )
    m = parse_manifest(text, "t.yaml")
    history = [
        applied(m),
        joined("w1"),
        *placed("router", "w1", "resident"),
        *placed("billing", "w1", "resident"),
        *placed("technical", "w1", "resident"),
        *placed("legal", "w1", "standby", size=2 * GB),
        *_completed("billing", at(1)),
        *_completed("technical", at(2)),
    ]
    state = view(history, now=at(3), heartbeats=["w1"])
    commands = decide(state, m, PromoteWanted(model_id="legal"), at(3))
    assert _controls(commands) == [
        ("demote", "billing", "w1"),
        ("demote", "technical", "w1"),
        ("promote", "legal", "w1"),
    ]


def test_an_on_demand_cold_start_over_budget_demotes_the_lru_model() -> None:
    m = manifest(gpu="3GB")
    history = [*_placed_cluster(m), *_completed("billing", at(1)), *_completed("technical", at(2))]
    cold = TierChanged(
        occurred_at=at(3),
        model_id="legal",
        worker_id="w1",
        from_tier="standby",
        to_tier="resident",
        reason="on_demand",
        elapsed_ms=5.0,
        bytes_held=GB,
        cold_start=True,
    )
    state = view([*history, cold], now=at(3), heartbeats=["w1"])
    commands = decide(state, m, cold, at(3))
    assert _controls(commands) == [("demote", "billing", "w1")]


def test_accelerator_memory_of_the_worker_limits_residents_too() -> None:
    m = manifest(gpu="10GB")
    history = [
        applied(m),
        joined("w1", ram=16 * GB, accelerator=3 * GB),
        *placed("router", "w1", "resident"),
        *placed("billing", "w1", "resident"),
        *placed("technical", "w1", "resident"),
        *placed("legal", "w1", "standby"),
        *_completed("billing", at(1)),
    ]
    state = view(history, now=at(2), heartbeats=["w1"])
    commands = decide(state, m, PromoteWanted(model_id="legal"), at(2))
    assert _controls(commands) == [("demote", "technical", "w1"), ("promote", "legal", "w1")]


# -- session LRU -------------------------------------------------------------------------------


def _session(session_id: str, opened: float, last: float, worker: str = "w1") -> list:
    return [
        SessionOpened(occurred_at=at(opened), session_id=session_id, model_id="billing", worker_id=worker),
        SessionTouched(
            occurred_at=at(last),
            session_id=session_id,
            model_id="billing",
            worker_id=worker,
            cached_tokens=10,
            kv_bytes=100,
        ),
    ]


def test_an_idle_session_is_evicted_and_a_young_or_recent_one_is_not() -> None:
    m = manifest()  # idle_threshold 60s, min_lifetime 30s
    history = [
        *_placed_cluster(m),
        *_session("idle", opened=0, last=10),  # idle 90s at t=100, opened 100s ago: evicted
        *_session("recent", opened=0, last=80),  # idle only 20s: kept
        *_session("evicted", opened=0, last=5),
        SessionKvEvicted(
            occurred_at=at(6), session_id="evicted", model_id="billing", worker_id="w1", bytes_freed=1, reason="idle"
        ),
    ]
    state = view(history, now=at(100), heartbeats=["w1"])
    commands = decide(state, m, Sweep(), at(100))
    assert [(c.command.action, c.command.session_id, c.command.reason) for c in commands] == [
        ("evict_session", "idle", "idle")
    ]
    assert commands[0].command.model_id == "billing"
    # a session idle long enough but younger than min_lifetime stays
    m_long = manifest(lru="lru: {idle_threshold: 1s, min_lifetime: 300s, sweep_interval: 10s}")
    young = view(
        [applied(m_long), joined("w1"), *_session("young", opened=50, last=50)], now=at(100), heartbeats=["w1"]
    )
    assert decide(young, m_long, Sweep(), at(100)) == []


def test_a_session_eviction_in_flight_is_not_sent_twice() -> None:
    m = manifest()
    state = view([*_placed_cluster(m), *_session("idle", opened=0, last=10)], now=at(100), heartbeats=["w1"])
    first = decide(state, m, Sweep(), at(100))
    assert len(first) == 1
    state = note_sent(state, first, at(100))
    assert decide(state, m, Sweep(), at(110)) == []


# -- placement, liveness ------------------------------------------------------------------------


def test_placement_spreads_models_within_each_workers_memory() -> None:
    m = manifest(gpu="3GB")
    workers = [joined("w1", ram=2 * GB), joined("w2", ram=2 * GB), router_host("r1", ram=2 * GB)]
    state = view([applied(m), *workers], heartbeats=["w1", "w2", "r1"])
    commands = decide(state, m, Tick(), T0)
    loads = [(c.command.model_id, c.worker_id, c.command.tier) for c in commands if isinstance(c, Control)]
    assert sorted(loads) == [
        ("billing", "w1", "resident"),
        ("legal", "w1", "standby"),
        ("router", "r1", "resident"),  # the entry model on the router host, the specialists on the workers
        ("technical", "w2", "resident"),
    ]
    placed_events = [c.event for c in commands if isinstance(c, Emit)]
    assert [e.type for e in placed_events] == ["ModelPlaced"] * 4
    # every ModelPlaced comes before its load, in the same group
    for c in commands:
        if isinstance(c, Control):
            group = [x for x in commands if x.group == c.group]
            assert isinstance(group[0], Emit)
            assert group[1] is c
    # once sent, a second tick places nothing again
    state = note_sent(state, commands, T0)
    assert [c for c in decide(state, m, Tick(), at(0.5)) if isinstance(c, Control)] == []


def test_a_model_that_fits_no_worker_is_reported_with_the_numbers() -> None:
    m = manifest()
    state = view([applied(m), joined("w1", ram=GB + GB // 2), router_host("r1")], heartbeats=["w1", "r1"])
    commands = decide(state, m, Tick(), T0)
    refusals = [c for c in commands if isinstance(c, Refuse)]
    assert {r.model_id for r in refusals} == {"technical", "legal"}
    assert "cannot place technical (resident, 1 GB): w1 has 500 MB free of 1.5 GB RAM" in refusals[0].reason


def test_a_silent_worker_is_lost_and_its_models_are_placed_on_the_others() -> None:
    m = manifest()
    history = [
        applied(m),
        joined("w1"),
        joined("w2"),
        *placed("router", "w1", "resident"),
        *placed("billing", "w2", "resident"),
    ]
    history += [*placed("technical", "w2", "resident"), *placed("legal", "w2", "standby")]
    state = view(history, now=T0, heartbeats=["w1", "w2"])
    state = saw_heartbeat(state, beat("w1"), at(5))  # w2 stays silent
    assert decide(state, m, Tick(), at(5)) == []  # 5s < 3 missed intervals of 2s
    commands = decide(state, m, Tick(), at(7))
    lost = [c.event for c in commands if isinstance(c, Emit)]
    assert [(e.type, e.worker_id, e.reason) for e in lost] == [("WorkerLost", "w2", "heartbeat_timeout")]
    # once the log has the WorkerLost, its models go to w1
    from nrt.core.policies import absorb

    state = absorb(note_sent(state, commands, at(7)), lost[0], at(7))
    assert state.cluster.workers["w2"].alive is False
    replaced = decide(state, m, lost[0], at(7))
    assert sorted(_controls(replaced)) == [
        ("load", "billing", "w1"),
        ("load", "legal", "w1"),
        ("load", "technical", "w1"),
    ]


def test_a_worker_that_beats_but_is_unknown_to_the_log_is_announced_after_a_grace() -> None:
    m = manifest()
    state = view([applied(m)], now=T0)
    state = saw_heartbeat(state, beat("w9"), T0)
    assert decide(state, m, Tick(), T0) == []
    state = saw_heartbeat(state, beat("w9"), at(2))
    [announce] = decide(state, m, Tick(), at(2.5))
    assert isinstance(announce, Emit)
    assert announce.event.type == "WorkerJoined"
    assert announce.event.worker_id == "w9"
    assert decide(note_sent(state, [announce], at(2.5)), m, Tick(), at(3)) == []


def test_a_worker_lost_while_we_were_down_is_noticed_after_the_grace() -> None:
    m = manifest()
    state = view([applied(m), joined("w1"), *placed("router", "w1", "resident")], now=at(100))
    assert [c for c in decide(state, m, Tick(), at(103)) if isinstance(c, Emit) and c.event.type == "WorkerLost"] == []
    [lost] = [c for c in decide(state, m, Tick(), at(107)) if isinstance(c, Emit)]
    assert isinstance(lost.event, WorkerLost)


# -- manifests that cannot fit --------------------------------------------------------------------


def test_an_over_budget_manifest_is_rejected_naming_the_numbers() -> None:
    with pytest.raises(ManifestError, match=r"resident models need 3 GB .* but gpu_budget is 2 GB"):
        manifest(gpu="2GB")
    # footprints known only from the catalogue: the same check, in the policies
    undeclared = parse_manifest(re.sub(r"\n *footprint: 1GB", "", manifest_text(gpu="2GB")), "t.yaml")
    sized = with_footprints(undeclared, lambda source: {"/models/router": 2 * GB}.get(source, GB // 2))
    problems = check_fit(view([]), sized, T0)
    assert problems == [
        "resident models need 3 GB (router 2 GB, billing 500 MB, technical 500 MB) but gpu_budget is 2 GB; "
        "raise gpu_budget or move models to another tier"
    ]


def test_a_manifest_that_no_live_worker_can_hold_is_rejected() -> None:
    m = manifest()
    state = view([joined("w1", ram=2 * GB), router_host("r1", ram=GB // 2)], heartbeats=["w1", "r1"])
    problems = check_fit(state, m, T0)
    assert problems == [
        "cannot place router (resident, 1 GB) on a router host: r1 has 500 MB free of 500 MB RAM",
        "cannot place legal (standby, 1 GB): w1 has 0 B free of 2 GB RAM",
    ]


# -- drained swap planning -------------------------------------------------------------------------


def test_a_swap_warms_added_models_first_and_unloads_dropped_ones_after() -> None:
    old = manifest(gpu="4GB")
    history = [*_placed_cluster(old)]
    state = view(history, heartbeats=["w1"])
    new_text = manifest_text(gpu="4GB").replace(
        "    - id: legal\n      source: /models/legal\n", "    - id: contracts\n      source: /models/contracts\n"
    )
    new = parse_manifest(new_text, "new.yaml")
    plan = plan_swap(state, old, new, T0, "swap-1")
    assert isinstance(plan, SwapPlan)
    assert (plan.from_version, plan.to_version) == (1, 2)
    assert plan.added == ("contracts",)
    assert plan.removed == ("legal",)
    assert plan.warmed == ("contracts",)
    warm = [c for c in plan.warm if isinstance(c, Control)]
    assert warm[0].command.manifest_version == 2
    assert warm[0].command.reason == "manifest_swap"
    after = after_cutover(state, new, plan, T0)
    assert _controls(after) == [("unload", "legal", "w1")]


def test_a_swap_that_does_not_fit_is_rejected_before_anything_changes() -> None:
    old = manifest()
    state = view(_placed_cluster(old, worker_ram=5 * GB), heartbeats=["w1"])
    contracts = "    - id: contracts\n      source: /models/contracts\n      tier: standby\n      footprint: 3GB\n"
    bigger = parse_manifest(manifest_text().replace("\nrouting:", "\n" + contracts + "routing:"), "big.yaml")
    assert bigger.model("contracts").footprint == 3 * GB
    plan = plan_swap(state, old, bigger, T0, "swap-1")
    assert isinstance(plan, SwapRejected)
    assert plan.message == (
        "the new manifest does not fit: cannot place contracts (standby, 3 GB): w1 has 1 GB free of 5 GB RAM"
    )


def test_nothing_is_placed_without_live_workers() -> None:
    m = manifest()
    state = view([applied(m)])
    assert state.cluster.manifest_version == 1
    assert decide(state, m, Tick(), T0) == []


def test_session_kv_counts_against_the_resident_budget_until_evicted() -> None:
    from nrt.core.policies.budget import holdings, tier_total

    m = manifest()
    kv = 300 * 10**6
    touched = SessionTouched(
        occurred_at=at(2), session_id="s", model_id="billing", worker_id="w1", cached_tokens=10, kv_bytes=kv
    )
    without = tier_total(holdings(view(_placed_cluster(m), now=at(3)), m), "resident")
    with_kv = view([*_placed_cluster(m), touched], now=at(3))
    assert tier_total(holdings(with_kv, m), "resident") == without + kv
    evicted = SessionKvEvicted(
        occurred_at=at(3),
        session_id="s",
        model_id="billing",
        worker_id="w1",
        bytes_freed=kv,
        reason="max_active_sessions",
    )
    after = view([*_placed_cluster(m), touched, evicted], now=at(4))
    assert tier_total(holdings(after, m), "resident") == without
    session = after.cluster.sessions["s"]
    assert (session.kv_bytes, session.kv_evicted, session.evicted_reason) == (0, True, "max_active_sessions")
