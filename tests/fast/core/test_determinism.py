"""The same log and the same clock give the same decisions: the same commands, the same event ids.

The policies read no clock and draw no random id: the events they build are stamped with
the ``now`` they are given and carry ids derived from the trigger (``cause_of``).
"""

from __future__ import annotations

import ast
import uuid
from datetime import datetime
from pathlib import Path

import nrt.core.policies
import nrt.core.state
from cluster_helpers import GB, T0, applied, at, beat, manifest, manifest_text, view
from nrt.core.events import EVENT_TYPES, Event, ManifestApplied, ModelPlaced, WorkerJoined, derived_event_id
from nrt.core.manifest import Manifest, parse_manifest
from nrt.core.policies import (
    Command,
    ControlState,
    Emit,
    GroupRan,
    Tick,
    Trigger,
    absorb,
    advance_swap,
    decide,
    note_sent,
    saw_heartbeat,
    start_swap,
)


def the_log(m: Manifest) -> list[Event]:
    joined = [
        WorkerJoined(
            event_id=f"00000000-0000-4000-8000-00000000000{i}",
            occurred_at=T0,
            worker_id=w,
            host=w,
            cpu_count=2,
            ram_bytes=4 * GB,
        )
        for i, w in enumerate(("w1", "w2"), start=1)
    ]
    first = applied(m)
    return [
        ManifestApplied(
            event_id="00000000-0000-4000-8000-000000000000",
            occurred_at=first.occurred_at,
            version=first.version,
            cluster=first.cluster,
            digest=first.digest,
            text=first.text,
        ),
        *joined,
    ]


def decisions(m: Manifest, log: list[Event]) -> list[tuple[datetime, list[Command]]]:
    """Run the controller's loop over ``log`` and a fixed timeline: what it decides, in order."""
    state = ControlState(started_at=T0)
    out: list[tuple[datetime, list[Command]]] = []

    def react(trigger: Trigger, now: datetime) -> None:
        nonlocal state
        commands = decide(state, m, trigger, now)
        state = note_sent(state, commands, now)
        out.append((now, commands))

    for event in log:
        state = absorb(state, event, T0)
    for worker in ("w1", "w2"):
        state = saw_heartbeat(state, beat(worker, 4 * GB), T0)
    react(log[0], T0)  # the manifest: place every model
    react(Tick(), at(0.5))  # nothing new to place
    state = saw_heartbeat(state, beat("w1", 4 * GB), at(5))  # w2 goes silent
    react(Tick(), at(7))  # w2 is lost
    state = saw_heartbeat(state, beat("w3", 4 * GB), at(7))
    state = saw_heartbeat(state, beat("w3", 4 * GB), at(9.5))
    react(Tick(), at(9.5))  # w3 beats but the log does not know it: announced
    return out


def test_the_same_log_and_clock_give_the_same_commands_and_event_ids() -> None:
    m = manifest(gpu="3GB")
    first = decisions(m, the_log(m))
    second = decisions(m, the_log(m))
    assert first == second
    events = [(now, c.event) for now, commands in first for c in commands if isinstance(c, Emit)]
    assert {e.type for _, e in events} == {"ModelPlaced", "WorkerLost", "WorkerJoined"}
    for now, event in events:
        assert event.occurred_at == now  # stamped with the decision's time, not a clock
        assert uuid.UUID(event.event_id).version == 5  # derived, not random (the store wants a UUID)
    assert len({e.event_id for _, e in events}) == len(events)


def test_event_ids_derive_from_the_triggering_event() -> None:
    m = manifest(gpu="3GB")
    log = the_log(m)
    (_, placed), *_ = decisions(m, log)
    first = next(c.event for c in placed if isinstance(c, Emit))
    assert isinstance(first, ModelPlaced)
    assert first.event_id == derived_event_id(log[0].event_id, "ModelPlaced", first.model_id, first.worker_id)
    # another trigger (the same manifest applied again under another id) gives other ids
    again = ManifestApplied(
        event_id=str(uuid.uuid5(uuid.NAMESPACE_URL, "again")),
        occurred_at=T0,
        version=1,
        cluster=m.cluster,
        digest=m.digest,
        text=m.text,
    )
    (_, other), *_ = decisions(m, [again, *log[1:]])
    assert {c.event.event_id for c in other if isinstance(c, Emit)}.isdisjoint(
        {c.event.event_id for c in placed if isinstance(c, Emit)}
    )


def test_a_swap_replayed_with_the_same_log_and_clock_builds_the_same_events() -> None:
    old = manifest()
    new = parse_manifest(
        manifest_text(extra="    - id: contracts\n      source: /c\n      footprint: 1GB\n      tier: standby\n"), "v2"
    )

    def run() -> list[Command]:
        state = view([applied(old), *the_log(old)[1:]], heartbeats=["w1", "w2"])
        step = start_swap(state, old, new, T0)
        commands = list(step.commands)
        published = tuple(c.event.event_id for c in commands if isinstance(c, Emit))
        step = advance_swap(step.swap, state, GroupRan("warm:contracts", True, published), at(1))
        commands += step.commands
        return commands

    first, second = run(), run()
    assert first == second
    assert [c.event.type for c in first if isinstance(c, Emit)] == ["ModelPlaced", "DrainStarted"]


def test_no_policy_or_fold_reads_a_clock_or_draws_an_id() -> None:
    """Every event the policies build names its id and its time; nothing calls a clock or uuid4."""
    event_names = {t.__name__ for t in EVENT_TYPES}
    forbidden = {"uuid4", "new_event_id", "utc_now", "now", "time", "monotonic", "perf_counter", "random"}
    sources = [
        path
        for package in (nrt.core.policies, nrt.core.state)
        for path in sorted(Path(next(iter(package.__path__))).glob("*.py"))
    ]
    assert len(sources) > 10
    for path in sources:
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            assert name not in forbidden, f"{path.name}:{node.lineno} calls {name}()"
            if name in event_names:
                given = {k.arg for k in node.keywords}
                assert {"event_id", "occurred_at"} <= given, (
                    f"{path.name}:{node.lineno} builds {name} without id or time"
                )
