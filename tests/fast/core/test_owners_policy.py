"""A request whose gateway is gone is ended (RequestFailed owner_lost); a drain never waits on one; after a
restart, which workers of the log have not been heard yet (pure)."""

from __future__ import annotations

from msgspec.structs import replace
from test_swap_machine import FAST_DRAIN, LEGAL, also, emitted, running_v1, v2

from cluster_helpers import T0, at, joined, manifest, view
from nrt.core.events import DrainStarted, Event, RequestAdmitted, RequestCompleted, RequestFailed, WorkerLost
from nrt.core.manifest import parse_manifest
from nrt.core.policies import ControlState, SwapPhase, Tick, advance_swap, decide, saw_gateway, start_swap
from nrt.core.policies.liveness import unheard
from nrt.core.policies.owners import OWNER_LOST, end_orphans, held_under, orphaned
from nrt.core.protocol import GatewayHeartbeat
from nrt.core.state import fold
from nrt.core.vocabulary import DrainOutcome, Reason

LOST_AFTER_S = 6.0  # the default tuning: 2 s heartbeats, 3 missed


def admitted(request_id: str, gateway_id: str | None) -> RequestAdmitted:
    return RequestAdmitted(
        occurred_at=T0, request_id=request_id, manifest_version=1, model_id="router", gateway_id=gateway_id
    )


def beating(state: ControlState, gateway_id: str, seconds: float) -> ControlState:
    return saw_gateway(state, GatewayHeartbeat(gateway_id=gateway_id), at(seconds))


def test_the_fold_records_who_admitted_a_request_until_it_ends() -> None:
    done = RequestCompleted(
        request_id="a", manifest_version=1, model_id="billing", prompt_tokens=1, completion_tokens=1, latency_ms=1.0
    )
    failed = RequestFailed(request_id="b", manifest_version=1, code=OWNER_LOST, message="gone", status=503)
    state = fold([admitted("a", "g1"), admitted("b", "g1"), admitted("c", None)])
    assert state.admitted_by == {"a": "g1", "b": "g1"}  # c: its gateway did not say who it was
    assert set(state.in_flight) == {"a", "b", "c"}
    state = fold([done, failed], state)
    assert (state.admitted_by, set(state.in_flight)) == ({}, {"c"})


def test_requests_of_a_silent_gateway_are_failed_as_owner_lost_after_the_grace() -> None:
    log: list[Event] = [admitted("old-1", "g-crashed"), admitted("old-2", "g-crashed"), admitted("live", "g-up")]
    state = view(log, now=T0)  # the controller starts listening at T0
    state = beating(state, "g-up", LOST_AFTER_S)

    # within the grace, a gateway not heard yet may still beat: nothing is ended, the drain counts all three
    assert orphaned(state, at(LOST_AFTER_S)) == []
    assert held_under(state, 1, at(LOST_AFTER_S)) == 3

    now = at(LOST_AFTER_S + 0.5)
    assert orphaned(state, now) == ["old-1", "old-2"]
    assert held_under(state, 1, now) == 1  # only the request a live gateway holds
    ends = emitted(decide(state, None, Tick(), now))
    assert [(e.request_id, e.code, e.status, e.manifest_version) for e in ends if isinstance(e, RequestFailed)] == [
        ("old-1", OWNER_LOST, 503, 1),
        ("old-2", OWNER_LOST, 503, 1),
    ]
    assert "g-crashed" in ends[0].message  # type: ignore[attr-defined]

    # deciding it again on a later tick is the same event (the log keeps one)
    again = emitted(end_orphans(state, at(LOST_AFTER_S + 1.0)))
    assert [e.event_id for e in again] == [e.event_id for e in ends]

    # once folded, they leave in_flight; the live gateway's request stays
    state = also(state, *ends)
    assert (set(state.cluster.in_flight), state.cluster.admitted_by) == ({"live"}, {"live": "g-up"})
    assert end_orphans(state, at(LOST_AFTER_S + 1.0)) == []


def test_a_request_whose_gateway_was_not_recorded_is_left_alone() -> None:
    state = view([admitted("legacy", None)], now=T0)
    assert end_orphans(state, at(3600)) == []
    assert held_under(state, 1, at(3600)) == 1


def test_a_drain_does_not_wait_on_a_request_no_live_gateway_holds() -> None:
    old = manifest(lru=FAST_DRAIN)
    new = v2(old.text.replace(LEGAL, ""))
    slow = parse_manifest(new.text.replace("timeout: 1s", "timeout: 30s"), "v2.yaml")
    log = [*running_v1(old), admitted("cut-1", "g-crashed"), admitted("cut-2", "g-crashed")]
    now = at(LOST_AFTER_S + 0.5)  # the crashed gateway's grace is over; the worker beats on
    state = replace(view(log, now=now, heartbeats=["w1"]), started_at=T0)

    step = start_swap(state, old, slow, now)
    [drain] = emitted(step.commands)
    assert isinstance(drain, DrainStarted)
    assert drain.in_flight == 0  # the two cut requests are nobody's
    state = also(state, drain)
    step = advance_swap(step.swap, state, Tick(), at(LOST_AFTER_S + 0.6))
    step = advance_swap(step.swap, state, Tick(), at(LOST_AFTER_S + 0.8))  # the admission settle is over
    assert step.swap.phase is SwapPhase.CUTTING_OVER  # not the 30 s drain timeout
    assert step.swap.outcome is DrainOutcome.DRAINED
    assert step.swap.abandoned == 0


def test_workers_the_log_holds_alive_are_unheard_until_they_beat_or_are_lost() -> None:
    log = [joined("w1"), joined("w2"), joined("w3")]
    state = view(log, now=T0, heartbeats=["w1"])
    state = also(state, WorkerLost(occurred_at=T0, worker_id="w3", reason=Reason.SHUTDOWN))
    assert unheard(state) == ["w2"]


async def test_a_cut_off_gateways_own_end_of_an_orphaned_request_is_the_same_event_and_the_log_keeps_one() -> None:
    """cluster_state ended the request (owner_lost) while its gateway was only cut off; the gateway's own end,
    reported once it is back, has the same id: the log records the request's end once, the first."""
    from nrt.adapters.store import InMemoryEventStore
    from nrt.core.events import request_end_id

    log: list[Event] = [admitted("r", "g-cut-off")]
    state = view(log, now=T0)
    [orphan_end] = [
        e for e in emitted(decide(state, None, Tick(), at(LOST_AFTER_S + 1))) if isinstance(e, RequestFailed)
    ]
    gateway_end = RequestFailed(
        event_id=request_end_id("r"),
        request_id="r",
        manifest_version=1,
        code="deadline_exceeded",
        message="late",
        status=504,
    )
    assert orphan_end.event_id == gateway_end.event_id == request_end_id("r")

    store = InMemoryEventStore()
    await store.append([*log, orphan_end])
    await store.append([gateway_end])
    ends = [r.event for r in await store.read_stream("request:r") if isinstance(r.event, RequestFailed)]
    assert [(e.code, e.status) for e in ends] == [(OWNER_LOST, 503)]
