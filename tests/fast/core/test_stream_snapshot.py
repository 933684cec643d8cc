"""What a follower keeps of cluster_state's fold when it starts from a snapshot (``nrt.core.state.stream``)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from msgspec.structs import replace

from nrt.core.events import (
    CONTROL_PLANE,
    SESSION_EVENTS,
    ApiKeyCreated,
    ApiKeyRevoked,
    DrainCompleted,
    DrainStarted,
    Event,
    ManifestApplied,
    RequestAdmitted,
    RequestCompleted,
    RouterCalibrated,
    SessionOpened,
    WorkerJoined,
    WorkerLost,
)
from nrt.core.state import ClusterState, fold
from nrt.core.state.stream import control_plane, control_plane_and_sessions, followable, narrow
from nrt.core.vocabulary import DrainOutcome, KeyScope, Reason
from nrt.testing.traffic import traffic


def _log(seed: int) -> list[Event]:
    """Traffic with every kind of control-plane fact among the requests: keys (one used, then revoked), a
    router's floor, a drain and a new manifest, a second worker that is lost, a model only requests name."""
    events: list[Event] = list(traffic(400, seed=seed))
    at = events[-1].occurred_at
    key = ApiKeyCreated(
        key_id="k1", name="ops", scope=KeyScope.INFER, key_sha256="0" * 64, occurred_at=at + timedelta(seconds=1)
    )
    events += [
        key,
        RequestAdmitted(
            request_id="r-key",
            model_id="router",
            manifest_version=1,
            key_id="k1",
            occurred_at=at + timedelta(seconds=2),
        ),
        RequestCompleted(
            request_id="r-key",
            manifest_version=1,
            model_id="unplaced",
            key_id="k1",
            prompt_tokens=3,
            completion_tokens=5,
            latency_ms=12.0,
            occurred_at=at + timedelta(seconds=3),
        ),
        RouterCalibrated(model_id="router", worker_id="w1", threshold=0.4, rule="centroid", examples=9),
        WorkerJoined(worker_id="w2", host="h2", cpu_count=2, ram_bytes=2**30),
        SessionOpened(session_id="s-w2", model_id="billing", worker_id="w2"),
        WorkerLost(worker_id="w2", reason=Reason.HEARTBEAT_TIMEOUT),
        DrainStarted(from_version=1, to_version=2, in_flight=1, timeout_s=5.0),
        DrainCompleted(from_version=1, to_version=2, outcome=DrainOutcome.DRAINED, waited_ms=10.0),
        ManifestApplied(version=2, cluster="bench", digest="1" * 64, text="cluster: bench\n"),
        ApiKeyRevoked(key_id="k1"),
    ]
    return events


def _position_free(state: ClusterState) -> ClusterState:
    """A state without how far into the log it is (a control-plane fold counts only its own events)."""
    return replace(state, events_applied=0, last_event_at=None)


@pytest.mark.parametrize("seed", [3, 11, 29])
def test_the_control_plane_of_the_whole_fold_is_the_fold_of_the_control_plane_events(seed: int) -> None:
    events = _log(seed)
    whole = fold(events)
    control = fold(e for e in events if isinstance(e, CONTROL_PLANE))
    assert whole.sessions  # the view has something to drop
    assert whole.counters.requests_completed
    view = control_plane(whole)
    assert _position_free(view) == _position_free(control)
    assert (view.events_applied, view.last_event_at) == (whole.events_applied, whole.last_event_at)
    assert view.api_keys["k1"].revoked_at is not None
    assert whole.api_keys["k1"].usage.requests == 1
    assert view.api_keys["k1"].usage.requests == 0
    assert "unplaced" in whole.models
    assert "unplaced" not in view.models  # only a request named it
    assert view.models["router"].calibrated is not None


def test_a_follower_keeps_all_of_it_or_its_control_plane() -> None:
    state = fold(_log(5))
    assert narrow(state, ()) is state
    assert narrow(state, CONTROL_PLANE) == control_plane(state)
    assert narrow(state, (ManifestApplied,)) == control_plane(state)  # the worker's follower: the manifest in it
    with pytest.raises(ValueError, match="SessionOpened, WorkerJoined"):
        followable((WorkerJoined, SessionOpened))
    followable(CONTROL_PLANE)


@pytest.mark.parametrize("seed", [3, 11])
def test_router_svcs_view_is_the_fold_of_the_control_plane_and_session_events(seed: int) -> None:
    events = _log(seed)
    whole = fold(events)
    selected = (*CONTROL_PLANE, *SESSION_EVENTS)
    routers = fold(e for e in events if isinstance(e, selected))
    view = narrow(whole, selected)
    assert view == control_plane_and_sessions(whole)
    assert view.sessions == whole.sessions
    assert view.sessions  # something to keep
    assert _position_free(view) == _position_free(routers)
    with pytest.raises(ValueError, match="every session type"):
        followable((*CONTROL_PLANE, SessionOpened))  # some session events only: a snapshot cannot say


def test_the_view_of_an_empty_state_is_empty() -> None:
    assert control_plane(ClusterState()) == ClusterState()
