"""Liveness counts only the heartbeats cluster_state could have heard: a slow start or an outage of its
own connection declares no worker lost; a worker silent while it was heard is lost as before."""

from __future__ import annotations

from msgspec.structs import replace

from cluster_helpers import DEFAULT_TUNING, at, joined, view
from nrt.core.policies import liveness


def test_a_worker_silent_while_nobody_listened_is_not_lost_until_it_misses_beats_after() -> None:
    limit = DEFAULT_TUNING.lost_after_s
    state = view([joined("w1")], now=at(0), heartbeats=["w1"])  # last heard at 0
    assert [type(c.event).__name__ for c in liveness.check(state, at(limit + 1), "t1")] == ["WorkerLost"]  # type: ignore[attr-defined]

    back = replace(state, started_at=at(limit + 5))  # the connection came back (or the controller started) then
    assert liveness.check(back, at(limit + 6), "t2") == []  # beats it could not hear are not missed
    lost = liveness.check(back, at(2 * limit + 6), "t3")  # silent for the whole limit since: lost
    assert [type(c.event).__name__ for c in lost] == ["WorkerLost"]  # type: ignore[attr-defined]
