"""A conversation stays with its KV and its specialist: the pure choices (nrt.core.routing.affinity),
the manifest's ``routing.sticky_margin`` and ``replicas``, and placement of several copies of a model."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest

from cluster_helpers import T0, applied, joined, manifest_text, placed, router_host, view
from nrt.core.events import Event, SessionKvEvicted, SessionTouched, WorkerLost
from nrt.core.manifest import Manifest, ManifestError, parse_manifest
from nrt.core.manifest.summary import summarize
from nrt.core.policies import Control, Emit, Refuse, Tick, budget_problems, decide, note_sent
from nrt.core.routing import (
    Decision,
    choose_worker,
    previous_specialist,
    rendezvous,
    session_holder,
    stay_on_specialist,
)
from nrt.core.state import ClusterState, fold

BILLING_TWICE = "    - id: billing\n      source: /models/billing\n      tier: resident\n"


def support(margin: str | None = None, replicas: int | None = None) -> Manifest:
    text = manifest_text()
    if margin is not None:
        text = text.replace("  entry: router\n", f"  entry: router\n  sticky_margin: {margin}\n")
    if replicas is not None:
        text = text.replace(BILLING_TWICE, f"{BILLING_TWICE}      replicas: {replicas}\n")
    return parse_manifest(text, "test.yaml")


def state_of(events: list[Event]) -> ClusterState:
    return fold(events)


def two_workers_on_billing(*more: Event) -> ClusterState:
    m = support()
    return state_of(
        [
            applied(m),
            joined("w1"),
            joined("w2"),
            *placed("billing", "w1", "resident"),
            *placed("billing", "w2", "resident"),
            *placed("technical", "w2", "resident"),
            *more,
        ]
    )


def touched(session_id: str, worker_id: str, model_id: str = "billing", seconds: float = 1.0) -> SessionTouched:
    return SessionTouched(
        occurred_at=T0 + timedelta(seconds=seconds),
        session_id=session_id,
        model_id=model_id,
        worker_id=worker_id,
        cached_tokens=40,
        kv_bytes=4096,
    )


def lost(worker_id: str) -> WorkerLost:
    return WorkerLost(occurred_at=T0 + timedelta(seconds=5), worker_id=worker_id, reason="heartbeat_timeout")


def decision(intent: str | None, scores: dict[str, float], target: str | None = None) -> Decision:
    return Decision(
        entry="router",
        intent=intent,
        target=target or intent or "router",
        scores=scores,
        confidence=max(scores.values()),
        threshold=0.3,
        threshold_source="manifest",
        rule="router.output.intent -> specialists.{intent}",
    )


# -- which worker --------------------------------------------------------------------------


def test_a_turn_goes_to_the_worker_holding_its_sessions_kv() -> None:
    for holder in ("w1", "w2"):
        state = two_workers_on_billing(touched("s1", holder))
        target = choose_worker(state, "billing", "s1")
        assert (target.worker_id, target.why) == (holder, "holder")


def test_a_session_the_log_does_not_know_yet_goes_where_its_id_hashes_on_every_router() -> None:
    state = two_workers_on_billing()
    first = choose_worker(state, "billing", "new-session")
    assert first.why == "hashed"
    assert first.worker_id == rendezvous("new-session", ["w2", "w1"]) in ("w1", "w2")
    assert choose_worker(state, "billing", "new-session") == first  # the same answer every time
    # sessions spread over the workers
    spread = Counter(choose_worker(state, "billing", f"s{i}").worker_id for i in range(400))
    assert set(spread) == {"w1", "w2"}
    assert min(spread.values()) > 150


def test_losing_a_worker_moves_only_its_own_sessions() -> None:
    workers = ["w1", "w2", "w3"]
    before = {f"s{i}": rendezvous(f"s{i}", workers) for i in range(300)}
    after = {s: rendezvous(s, ["w1", "w3"]) for s in before}
    moved = {s for s in before if before[s] != after[s]}
    assert moved == {s for s, w in before.items() if w == "w2"}
    assert rendezvous("s", []) is None


def test_a_lost_or_evicted_holder_sends_the_turn_elsewhere() -> None:
    gone = two_workers_on_billing(touched("s1", "w1"), lost("w1"))
    target = choose_worker(gone, "billing", "s1")
    assert (target.worker_id, target.why) == (None, "queue")  # w2 alone serves billing now: its queue group
    evicted = SessionKvEvicted(
        occurred_at=T0 + timedelta(seconds=2),
        session_id="s1",
        model_id="billing",
        worker_id="w1",
        bytes_freed=4096,
        reason="idle",
    )
    state = two_workers_on_billing(touched("s1", "w1"), evicted)
    assert session_holder(state, "s1", "billing") is None
    assert choose_worker(state, "billing", "s1").why == "hashed"


def test_a_retry_avoids_the_worker_the_gateway_saw_lost_before_the_fold_does() -> None:
    state = two_workers_on_billing(touched("s1", "w1"))
    target = choose_worker(state, "billing", "s1", avoid=("w1",))
    assert target.worker_id is None  # the queue group: w2 is the only one left
    assert target.why == "queue"


def test_no_session_or_another_model_uses_the_queue_group() -> None:
    state = two_workers_on_billing(touched("s1", "w1"))
    assert choose_worker(state, "billing", None).worker_id is None
    # the session's KV is on billing: a direct call to technical has nothing to stay with (one worker: queue)
    assert choose_worker(state, "technical", "s1").worker_id is None


# -- which specialist ----------------------------------------------------------------------


def test_a_conversation_stays_on_its_specialist_unless_the_new_intent_clears_the_margin() -> None:
    m = support(margin="0.2")
    state = two_workers_on_billing(touched("s1", "w1"))
    previous = previous_specialist(state, m, "s1")
    assert previous == "billing"
    close = decision("technical", {"billing": 0.40, "technical": 0.55, "legal": 0.05})
    kept = stay_on_specialist(m, close, previous)
    assert (kept.target, kept.intent) == ("billing", "billing")
    assert "stays on billing" in kept.rule
    assert "0.20" in kept.rule
    clear = decision("technical", {"billing": 0.30, "technical": 0.60, "legal": 0.10})
    moved = stay_on_specialist(m, clear, previous)
    assert (moved.target, moved.intent) == ("technical", "technical")
    assert "left billing" in moved.rule


def test_an_unconfident_turn_stays_and_a_zero_margin_follows_every_decision() -> None:
    m = support(margin="0.2")
    unsure = decision(None, {"billing": 0.2, "technical": 0.25, "legal": 0.1}, target="router")
    kept = stay_on_specialist(m, unsure, "billing")
    assert kept.target == "billing"
    assert "no confident intent" in kept.rule
    free = support(margin="0")
    close = decision("technical", {"billing": 0.40, "technical": 0.41, "legal": 0.05})
    assert stay_on_specialist(free, close, "billing").target == "technical"


def test_nothing_to_stay_with() -> None:
    m = support()
    d = decision("technical", {"billing": 0.40, "technical": 0.45, "legal": 0.05})
    assert stay_on_specialist(m, d, None) == d  # a new conversation
    assert previous_specialist(two_workers_on_billing(), m, "unknown") is None
    assert previous_specialist(two_workers_on_billing(), m, None) is None
    # the previous specialist is no longer served by any live worker: the decision stands
    gone = two_workers_on_billing(touched("s1", "w1"), lost("w1"), lost("w2"))
    assert previous_specialist(gone, m, "s1") is None


def test_a_fixed_route_has_no_stickiness_to_apply() -> None:
    text = manifest_text().replace("specialists.{intent}", "specialists.billing")
    m = parse_manifest(text, "test.yaml")
    d = decision("legal", {"billing": 0.1, "legal": 0.9}, target="billing")
    assert stay_on_specialist(m, d, "technical") == d


# -- the manifest ------------------------------------------------------------------------


def test_the_sticky_margin_defaults_and_parses() -> None:
    assert support().routing.sticky_margin == pytest.approx(0.02)
    assert support(margin="0.25").routing.sticky_margin == pytest.approx(0.25)
    assert support(margin="0").routing.sticky_margin == 0.0


@pytest.mark.parametrize(
    ("margin", "message"),
    [("1.5", "expected a number in [0, 1], got 1.5"), ("high", "routing.sticky_margin")],
)
def test_a_bad_sticky_margin_names_its_key_and_line(margin: str, message: str) -> None:
    with pytest.raises(ManifestError) as error:
        support(margin=margin)
    text = str(error.value)
    assert "routing.sticky_margin" in text
    assert message in text
    line = manifest_text().splitlines().index("  entry: router") + 2  # the margin's line, 1-based
    assert f"test.yaml:{line}: routing.sticky_margin" in text


def test_replicas_parse_and_bad_ones_are_errors() -> None:
    m = support(replicas=2)
    assert m.model("billing").replicas == 2
    assert m.model("technical").replicas == 1
    with pytest.raises(ManifestError, match=r"models\.specialists\[0\]\.replicas.*expected an integer >= 1, got 0"):
        support(replicas=0)
    router_replicas = manifest_text().replace(
        "    priority: critical\n", "    priority: critical\n    replicas: 2\n", 1
    )
    with pytest.raises(ManifestError, match="replicas"):
        parse_manifest(router_replicas, "test.yaml")


def test_the_summary_shows_the_replicas_and_the_margin() -> None:
    lines = summarize(support(margin="0.05", replicas=2), lambda _: None, []).splitlines()
    assert "replicas     billing x2 (a session's turns stay on the worker holding its KV)" in lines
    assert "sticky       a conversation leaves its specialist when a new intent beats it by 0.05" in lines
    plain = summarize(support(), lambda _: None, []).splitlines()
    assert not [line for line in plain if line.startswith("replicas")]


# -- placement ----------------------------------------------------------------------------


def test_a_model_with_two_replicas_is_placed_on_two_workers_and_topped_up_when_one_is_lost() -> None:
    m = support(replicas=2)
    state = view(
        [applied(m), joined("w1"), joined("w2"), joined("w3"), router_host("r1")], heartbeats=["w1", "w2", "w3", "r1"]
    )
    commands = decide(state, m, Tick(), T0)
    billing = sorted(c.worker_id for c in commands if isinstance(c, Control) and c.command.model_id == "billing")
    assert len(set(billing)) == len(billing) == 2
    groups = {c.group for c in commands if isinstance(c, Emit) and c.event.model_id == "billing"}  # type: ignore[union-attr]
    assert len(groups) == 2  # each copy loads on its own
    state = note_sent(state, commands, T0)
    assert [c for c in decide(state, m, Tick(), T0) if isinstance(c, Control)] == []  # sent: nothing more


def test_a_second_copy_waits_for_a_second_worker() -> None:
    m = support(replicas=2)
    state = view([applied(m), joined("w1"), router_host("r1")], heartbeats=["w1", "r1"])
    commands = decide(state, m, Tick(), T0)
    billing = [c.worker_id for c in commands if isinstance(c, Control) and c.command.model_id == "billing"]
    assert billing == ["w1"]
    assert not [c for c in commands if isinstance(c, Refuse) and c.model_id == "billing"]  # served: no refusal


def test_each_replica_counts_against_the_budget() -> None:
    assert budget_problems(support(replicas=2), ClusterState()) == []  # router, billing x2, technical: 4 GB of 4 GB
    problems = budget_problems(support(replicas=3), ClusterState())
    assert len(problems) == 1
    assert "resident models need 5 GB" in problems[0]
