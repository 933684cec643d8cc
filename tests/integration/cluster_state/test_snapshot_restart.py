"""cluster_state snapshots its folded state while it serves, and a restart folds only the log after
the latest snapshot, to the same state a fold of the whole log gives."""

from __future__ import annotations

import asyncio
import logging

import pytest
from nats.aio.client import Client

from cluster_helpers import manifest_text
from nrt.adapters.bus.jetstream import EventPublisher
from nrt.adapters.store import EventStore
from nrt.core.policies import Tuning
from nrt.core.state import fold
from nrt.core.state.snapshot import FOLD_VERSION
from nrt.testing.traffic import traffic
from state_services import StartService, until_head

QUIET = Tuning(heartbeat_s=60.0)  # w1 of the traffic never heartbeats: keep it alive for the test's length


async def _snapshot_at_least(store: EventStore, position: int, within: float = 10.0) -> int:
    deadline = asyncio.get_running_loop().time() + within
    while (latest := await store.latest_snapshot(FOLD_VERSION)) is None or latest.position < position:
        assert asyncio.get_running_loop().time() < deadline, f"no snapshot at or past {position}: {latest}"
        await asyncio.sleep(0.05)
    return latest.position


async def test_a_restart_starts_from_the_latest_snapshot_and_folds_only_the_rest(
    nc: Client, event_store: EventStore, start_cluster_state: StartService, caplog: pytest.LogCaptureFixture
) -> None:
    first = await start_cluster_state(
        manifest_text=manifest_text(), tuning=QUIET, snapshot_every_events=25, snapshot_every_s=0.2
    )
    publisher = EventPublisher(nc)
    for event in list(traffic(100, seed=5))[1:]:
        await publisher.publish(event)
    head = await until_head(event_store, 100)
    snapshot_at = await _snapshot_at_least(event_store, head)  # the writer catches up with the head
    await first.stop()

    more = list(traffic(160, seed=5))[100:]  # appended while cluster_state is down
    await event_store.append(more)
    logged = [r.event async for r in event_store.read_positions()]

    caplog.set_level(logging.INFO, logger="nrt.cluster_state")
    second = await start_cluster_state(manifest_text=manifest_text(), tuning=QUIET)
    rebuilt = [r.getMessage() for r in caplog.records if r.getMessage().startswith("rebuilt the state")]
    assert rebuilt, "cluster_state did not log its rebuild"
    assert f"snapshot at {snapshot_at} + {len(logged) - snapshot_at} events = position {len(logged)}" in rebuilt[-1]
    assert second.controller.position == len(logged)
    assert second.controller.cluster == fold(logged)
