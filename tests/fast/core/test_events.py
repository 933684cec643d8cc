"""Events: canonical encoding round-trips; the fold is pure and deterministic."""

from __future__ import annotations

import sys
from datetime import UTC, datetime

import msgspec
import pytest

from nrt.core.events import (
    EVENT_TYPES,
    EventDecodeError,
    ManifestApplied,
    ModelPlaced,
    RequestAdmitted,
    RequestCompleted,
    RequestDispatched,
    RequestFailed,
    RequestRouted,
    RouterFired,
    SessionKvEvicted,
    SessionOpened,
    SessionTouched,
    TierChanged,
    WorkerJoined,
    WorkerLost,
    decode,
    encode,
    schema_version,
)
from nrt.core.state import ClusterState, evolve, fold
from nrt.testing.traffic import traffic

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def test_every_event_type_round_trips_through_canonical_json() -> None:
    events = list(traffic(400))
    seen = {type(e) for e in events}
    assert len(seen) >= 10
    for event in events:
        data = encode(event)
        assert decode(data) == event
        assert encode(decode(data)) == data  # canonical: a stable fixed point
    assert {cls.__name__ for cls in EVENT_TYPES} >= {t.__name__ for t in seen}


def test_canonical_encoding_sorts_keys_and_uses_utc() -> None:
    event = WorkerLost(event_id="e1", occurred_at=T0, worker_id="w1", reason="shutdown")
    assert encode(event) == (
        b'{"event_id":"e1","occurred_at":"2026-05-01T12:00:00Z","reason":"shutdown","type":"WorkerLost","worker_id":"w1"}'
    )


def test_decode_rejects_unknown_types_and_bad_fields() -> None:
    with pytest.raises(EventDecodeError, match="not a valid event"):
        decode(b'{"type":"Teleported","event_id":"x"}')
    with pytest.raises(EventDecodeError, match="not a valid event"):
        decode(b'{"type":"WorkerLost","event_id":"x","occurred_at":"2026-05-01T12:00:00Z","worker_id":3,"reason":"r"}')
    with pytest.raises(EventDecodeError, match="not valid JSON"):
        decode(b"{nope")


def test_fold_twice_gives_equal_states() -> None:
    events = list(traffic(2_000))
    first = fold(events)
    second = fold(decode(encode(e)) for e in events)
    assert first == second
    assert msgspec.json.encode(first) == msgspec.json.encode(second)
    assert first.events_applied == 2_000


def test_evolve_never_mutates_its_input() -> None:
    events = list(traffic(300))
    states = [ClusterState()]
    for event in events:
        states.append(evolve(states[-1], event))
    snapshots = [msgspec.json.encode(s) for s in states]
    replayed = [ClusterState()]
    for event in events:
        replayed.append(evolve(replayed[-1], event))
    assert [msgspec.json.encode(s) for s in states] == snapshots == [msgspec.json.encode(s) for s in replayed]


def test_tiers_sessions_and_requests_fold_as_expected() -> None:
    events = [
        ManifestApplied(occurred_at=T0, version=1, cluster="c", digest="d", text="t"),
        WorkerJoined(occurred_at=T0, worker_id="w1", host="h", cpu_count=2, ram_bytes=8),
        TierChanged(
            occurred_at=T0,
            model_id="legal",
            worker_id="w1",
            from_tier="unloaded",
            to_tier="standby",
            reason="placement",
            elapsed_ms=3.0,
            bytes_held=100,
        ),
        TierChanged(
            occurred_at=T0,
            model_id="legal",
            worker_id="w1",
            from_tier="standby",
            to_tier="resident",
            reason="on_demand",
            elapsed_ms=9.0,
            bytes_held=300,
            cold_start=True,
        ),
        RequestAdmitted(occurred_at=T0, request_id="r1", manifest_version=1, model_id="router", session_id="s1"),
        SessionOpened(occurred_at=T0, session_id="s1", model_id="legal", worker_id="w1"),
        SessionTouched(
            occurred_at=T0, session_id="s1", model_id="legal", worker_id="w1", cached_tokens=40, kv_bytes=4096
        ),
    ]
    mid = fold(events)
    assert mid.manifest_version == 1
    assert mid.models["legal"].tiers == {"w1": "resident"}
    assert mid.models["legal"].placements["w1"].bytes_held == 300
    assert mid.models["legal"].cold_starts == 1
    assert mid.counters.cold_starts == 1
    assert mid.in_flight == {"r1": 1}
    assert mid.in_flight_under(1) == 1
    assert mid.sessions["s1"].kv_bytes == 4096
    assert mid.sessions["s1"].turns == 1
    end = fold(
        [
            SessionKvEvicted(
                occurred_at=T0, session_id="s1", model_id="legal", worker_id="w1", bytes_freed=4096, reason="idle"
            ),
            RequestCompleted(
                occurred_at=T0,
                request_id="r1",
                manifest_version=1,
                model_id="legal",
                prompt_tokens=5,
                completion_tokens=7,
                latency_ms=20.0,
            ),
            WorkerLost(occurred_at=T0, worker_id="w1", reason="heartbeat_timeout"),
        ],
        mid,
    )
    assert end.in_flight == {}
    assert end.counters.completion_tokens == 7
    assert end.counters.kv_evictions == 1
    assert end.models["legal"].placements == {}
    assert end.workers["w1"].alive is False
    assert end.sessions == {}
    assert mid.sessions["s1"].kv_bytes == 4096  # the earlier state is untouched


def test_a_requests_end_folded_before_its_start_leaves_it_out_of_flight() -> None:
    # A gateway's NATS server died before acknowledging RequestAdmitted: the gateway sent it again after the request's
    # RequestFailed had gone through another server, and the stream holds the end first. The request is not in flight.
    failed = RequestFailed(
        occurred_at=T0, request_id="r1", manifest_version=1, code="bus_lost", message="gone", status=503
    )
    admitted = RequestAdmitted(occurred_at=T0, request_id="r1", manifest_version=1, model_id="router", gateway_id="g1")
    ended_first = fold([failed])
    assert ended_first.ended_early == {"r1": T0}
    state = fold([admitted], ended_first)
    assert state.in_flight == {}
    assert state.in_flight_under(1) == 0  # a drain to the next version does not wait for it
    assert state.admitted_by == {}
    assert state.ended_early == {}  # forgotten once its start came
    assert (state.counters.requests_admitted, state.counters.requests_failed) == (1, 1)
    in_order = fold([admitted, failed])
    assert (in_order.in_flight, in_order.ended_early) == ({}, {})  # in order, nothing is remembered


def test_ends_whose_start_never_comes_are_remembered_up_to_a_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.modules["nrt.core.state.fold"], "ENDED_EARLY_KEPT", 3)
    ends = [
        RequestFailed(
            occurred_at=T0, request_id=f"r{i}", manifest_version=1, code="bus_lost", message="gone", status=503
        )
        for i in range(5)
    ]
    assert list(fold(ends).ended_early) == ["r2", "r3", "r4"]  # the oldest dropped


def test_a_failed_load_withdraws_the_placement_without_counting_a_tier_change() -> None:
    placed = ModelPlaced(
        occurred_at=T0, model_id="broken", worker_id="w1", artifact="/nonexistent", tier="standby", manifest_version=1
    )
    failed = TierChanged(
        occurred_at=T0,
        model_id="broken",
        worker_id="w1",
        from_tier="unloaded",
        to_tier="unloaded",
        reason="load_failed",
        elapsed_ms=1.0,
        bytes_held=0,
    )
    pending = fold([placed])
    assert pending.models["broken"].tiers == {"w1": "unloaded"}
    after = evolve(pending, failed)
    assert after.models["broken"].placements == {}
    assert (after.counters.tier_changes, after.models["broken"].demotions) == (0, 0)


def test_request_routed_folds_as_the_two_events_it_replaces() -> None:
    admitted = RequestAdmitted(occurred_at=T0, request_id="r1", manifest_version=1, model_id="router")
    fired = RouterFired(
        occurred_at=T0,
        request_id="r1",
        model_id="router",
        intent="billing",
        scores={"billing": 0.9},
        latency_ms=2.0,
        manifest_version=1,
    )
    dispatched = RequestDispatched(
        occurred_at=T0,
        request_id="r1",
        from_model="router",
        to_model="billing",
        intent="billing",
        rule="router.output.intent -> specialists.{intent} => billing",
        manifest_version=1,
    )
    routed = RequestRouted(
        occurred_at=T0,
        request_id="r1",
        manifest_version=1,
        model_id="router",
        worker_id="r1",
        intent="billing",
        scores={"billing": 0.9},
        confidence=0.9,
        threshold=0.5,
        target="billing",
        rule="router.output.intent -> specialists.{intent} => billing",
        latency_ms=2.0,
    )
    before = fold([admitted, fired, dispatched])  # a log written before RequestRouted: still folds
    after = fold([admitted, routed])
    assert (after.counters.router_fired, after.counters.dispatches) == (1, 1)
    assert after.counters == before.counters
    assert after.intents == before.intents == {"billing": 1}
    assert after.models["router"].requests == before.models["router"].requests == 1
    assert after.in_flight == before.in_flight == {"r1": 1}
    assert decode(encode(routed)) == routed


def test_a_version_1_worker_joined_row_decodes_as_a_specialist_worker() -> None:
    old_row = (
        b'{"accelerator_bytes":0,"cpu_count":2,"event_id":"e1","host":"h1","occurred_at":"2026-05-01T12:00:00Z",'
        b'"providers":["CPUExecutionProvider"],"ram_bytes":8,"type":"WorkerJoined","worker_id":"w1"}'
    )
    joined = decode(old_row)
    assert isinstance(joined, WorkerJoined)
    assert joined.role == "specialist"
    assert fold([joined]).workers["w1"].role == "specialist"
    router_host = WorkerJoined(occurred_at=T0, worker_id="r1", host="h1", cpu_count=2, ram_bytes=8, role="router")
    assert b'"role":"router"' in encode(router_host)
    assert fold([router_host]).workers["r1"].role == "router"
    assert schema_version("WorkerJoined") == 3  # version 2 added the role, version 3 the device
