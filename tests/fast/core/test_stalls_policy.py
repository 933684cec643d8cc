"""A command that makes no progress is not re-issued in a loop: it backs off, doubling, and says so.

The loop of issue 19: a worker that answers a load without its TierChanged ever reaching the
log (or a forged event that makes the log disagree with the worker) had the same ModelPlaced and
load sent every ``settle_s``, forever. Pure: the state, the triggers and the times are given."""

from __future__ import annotations

import itertools
from datetime import datetime

from cluster_helpers import T0, applied, at, beat, joined, manifest, placed, router_host, view
from nrt.core.events import TierChanged
from nrt.core.manifest import Manifest
from nrt.core.policies import (
    Command,
    Control,
    ControlState,
    Refuse,
    Tick,
    absorb,
    decide,
    note_reply,
    note_sent,
    saw_heartbeat,
    settle,
)
from nrt.core.policies.stalls import NO_PROGRESS
from nrt.core.vocabulary import Reason, Tier, WorkerRole


def _all_but_billing(m: Manifest) -> ControlState:
    history = [
        applied(m),
        joined("w1"),
        router_host("r1"),
        *placed("router", "r1", "resident"),
        *placed("technical", "w1", "resident"),
        *placed("legal", "w1", "standby"),
    ]
    return view(history, heartbeats=["w1", "r1"])


def _beat(state: ControlState, now: datetime) -> ControlState:
    state = saw_heartbeat(state, beat("w1"), now)
    return saw_heartbeat(state, beat("r1", role=WorkerRole.ROUTER), now)


def _tick(state: ControlState, m: Manifest, now: datetime) -> tuple[ControlState, list[Command]]:
    """One tick of the shell: heartbeats, settle (via note_sent), decide, record what is sent."""
    state = settle(_beat(state, now), now)
    commands = decide(state, m, Tick(), now)
    return note_sent(state, commands, now), commands


def _loads(commands: list[Command]) -> list[tuple[str, str]]:
    return [(c.command.model_id, c.worker_id) for c in commands if isinstance(c, Control)]


def _no_progress(commands: list[Command]) -> list[Refuse]:
    return [c for c in commands if isinstance(c, Refuse) and c.code == NO_PROGRESS]


def test_a_load_whose_effect_never_reaches_the_log_backs_off_exponentially_and_is_reported() -> None:
    m = manifest()
    state, commands = _tick(_all_but_billing(m), m, T0)
    load = next(c for c in commands if isinstance(c, Control))
    assert _loads(commands) == [("billing", "w1")]
    sent_at = [0.0]
    t = 0.0
    while t < 200:
        t += 0.5
        if any(isinstance(c, Control) for c in commands):
            state = note_reply(state, load, ok=True, now=at(t))  # it answers, its TierChanged never comes
        state, commands = _tick(state, m, at(t))
        if _loads(commands):
            sent_at.append(t)
            load = next(c for c in commands if isinstance(c, Control))
    # settle_s (10) after each reply the load counts as no progress; then it waits 15, 30, 60 s
    gaps = [round(b - a, 1) for a, b in itertools.pairwise(sent_at)]
    assert gaps == [25.5, 40.5, 70.5], gaps  # the reply 0.5 s + settle 10 s + the back-off
    assert len(sent_at) == 4  # not the 19 loads that one every settle_s would have sent by 200 s
    reports = _no_progress(decide(state, m, Tick(), at(t)))
    assert len(reports) == 1
    assert reports[0].model_id == "billing"
    assert "billing to resident on w1 made no progress 4 time(s) in a row" in reports[0].reason
    assert "the log did not show it resident in time" in reports[0].reason


def test_progress_clears_the_stall_and_a_failed_command_backs_off_the_same_way() -> None:
    m = manifest()
    state, commands = _tick(_all_but_billing(m), m, T0)
    load = next(c for c in commands if isinstance(c, Control))
    state = note_reply(state, load, ok=False, now=at(1))  # the worker says no
    state, commands = _tick(state, m, at(1))
    assert _loads(commands) == []
    assert "made no progress 1 time(s) in a row (load failed)" in _no_progress(commands)[0].reason
    state, commands = _tick(state, m, at(16))  # 15 s later: tried again
    assert _loads(commands) == [("billing", "w1")]
    load = next(c for c in commands if isinstance(c, Control))
    state = note_reply(state, load, ok=False, now=at(17))
    state, commands = _tick(state, m, at(40))  # the second failure waits 30 s (to 47), not 15
    assert _loads(commands) == []
    state, commands = _tick(state, m, at(47))
    assert _loads(commands) == [("billing", "w1")]
    load = next(c for c in commands if isinstance(c, Control))
    state = note_reply(state, load, ok=True, now=at(48))
    came = TierChanged(
        occurred_at=at(48),
        model_id="billing",
        worker_id="w1",
        from_tier=Tier.UNLOADED,
        to_tier=Tier.RESIDENT,
        reason=Reason.PLACEMENT,
        elapsed_ms=1.0,
        bytes_held=10**9,
    )
    state = absorb(state, came, at(48))
    assert state.stalls == {}  # the log shows it: the run of no progress is over
    state, commands = _tick(state, m, at(49))
    assert _no_progress(commands) == []
    assert _loads(commands) == []
