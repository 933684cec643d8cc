"""The log's readers (nrt replay, nrt events tail, cluster_state's reseed) on the in-memory store: no server.

They take an ``EventLog``; the same code runs on PostgreSQL in tests/integration/cluster_state.
"""

from __future__ import annotations

import asyncio

from cluster_state.reseed import state_in_force
from nrt.adapters.store import InMemoryEventStore
from nrt.core.eventlog import RecordedEvent
from nrt.core.events import ManifestApplied, ModelPlaced, TierChanged, WorkerJoined, WorkerLost
from nrt.core.state import ClusterState, fold
from nrt.entrypoints.cli.audit import Filters, follow_log, last_matching, replay_log
from nrt.testing.traffic import traffic


async def test_replay_folds_the_log_up_to_a_position_or_a_time() -> None:
    log = InMemoryEventStore()
    events = list(traffic(400, seed=21))
    await log.append(events)
    whole = await replay_log(log, None)
    assert (whole.position, whole.state) == (400, fold(events))
    upto = await replay_log(log, "150")
    assert (upto.position, upto.state) == (150, fold(events[:150]))
    at_time = await replay_log(log, events[299].occurred_at.isoformat())
    assert (at_time.position, at_time.state) == (300, fold(events[:300]))
    assert (await replay_log(log, "0")).position == 0


async def test_tail_shows_the_last_matches_then_each_new_one() -> None:
    log = InMemoryEventStore()
    events = list(traffic(300, seed=24))
    await log.append(events)
    tiers = Filters(types=("TierChanged",))
    before = await last_matching(log, tiers, await log.head(), 2)
    assert [r.event.type for r in before] == ["TierChanged", "TierChanged"]
    seen: list[RecordedEvent] = []
    caught_up = asyncio.Event()

    async def follow() -> None:
        async for record in follow_log(log, tiers, last=2, interval=0.01, stop_after=3):
            seen.append(record)
            if len(seen) == 2:
                caught_up.set()

    task = asyncio.create_task(follow())
    await asyncio.wait_for(caught_up.wait(), 5)
    later = TierChanged(
        model_id="legal",
        worker_id="w1",
        from_tier="standby",
        to_tier="resident",
        reason="command",
        elapsed_ms=3.0,
        bytes_held=1,
    )
    await log.append([WorkerLost(worker_id="w9", reason="shutdown"), later])
    await asyncio.wait_for(task, 5)
    assert [r.position for r in seen] == [*(r.position for r in before), 302]
    assert seen[-1].event == later


async def test_the_state_in_force_is_the_manifest_the_workers_and_their_placements() -> None:
    log = InMemoryEventStore()
    events = list(traffic(500, seed=25))
    await log.append(events)
    chosen = await state_in_force(log, page=7)
    assert isinstance(chosen[0], ManifestApplied)
    assert {type(e) for e in chosen} <= {ManifestApplied, WorkerJoined, ModelPlaced, TierChanged}
    positions = {e.event_id: i for i, e in enumerate(events)}
    assert [positions[e.event_id] for e in chosen] == sorted(positions[e.event_id] for e in chosen)
    rebuilt, whole = fold(chosen), fold(events)

    def tiers(state: ClusterState) -> dict[str, dict[str, str]]:
        return {m.model_id: {w: p.tier for w, p in m.placements.items()} for m in state.models.values()}

    assert tiers(rebuilt) == tiers(whole)
    assert tiers(whole)  # the traffic places models: the comparison is not between two empty states
    assert (rebuilt.manifest_version, rebuilt.manifest_digest) == (whole.manifest_version, whole.manifest_digest)
    assert rebuilt.workers.keys() == {w for w, worker in whole.workers.items() if worker.alive}
