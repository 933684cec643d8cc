"""cluster_state records the JetStream event stream in PostgreSQL: once, in order, across kill -9."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import msgspec
from click.testing import CliRunner
from nats.aio.client import Client

from cluster_helpers import manifest_text
from nrt.adapters.bus import rpc, subjects
from nrt.adapters.bus.jetstream import EventPublisher
from nrt.adapters.store import EventStore
from nrt.core.events import Event, ManifestApplied
from nrt.core.protocol import StateQuery
from nrt.core.state import ClusterState, fold
from nrt.entrypoints.cli.main import cli
from nrt.testing.traffic import traffic
from state_services import StartService, until_head


async def _publish(nc: Client, events: list[Event]) -> list[int]:
    publisher = EventPublisher(nc)
    return [await publisher.publish(e) for e in events]


async def _log_ids(store: EventStore) -> list[str]:
    return [r.event.event_id async for r in store.read_positions()]


async def test_published_events_land_in_postgres_once_and_in_order(
    nc: Client, event_store: EventStore, start_cluster_state: StartService
) -> None:
    early = list(traffic(300, seed=1))
    await _publish(nc, early)  # a backlog before cluster_state starts
    service = await start_cluster_state()
    late = list(traffic(200, seed=2))
    sequences = await _publish(nc, [*late, *late[:50]])  # the repeats are dropped by id
    await until_head(event_store, 500)
    await asyncio.sleep(0.3)
    assert await _log_ids(event_store) == [e.event_id for e in [*early, *late]]
    assert (await event_store.verify()).ok
    assert await event_store.checkpoint("cluster_state") == max(sequences)
    assert service.controller.cluster == fold([*early, *late])


async def _settled(store: EventStore, quiet: float = 1.0, within: float = 30.0) -> int:
    """The head once the log has stopped growing for ``quiet`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    head, since = await store.head(), loop.time()
    while loop.time() - since < quiet:
        assert loop.time() < deadline, "the log kept growing"
        await asyncio.sleep(0.1)
        now = await store.head()
        if now != head:
            head, since = now, loop.time()
    return head


async def test_state_subject_answers_the_folded_state_and_replay_yields_the_same(
    nc: Client, database_url: str, event_store: EventStore, start_cluster_state: StartService
) -> None:
    service = await start_cluster_state(manifest_text=manifest_text())
    await _publish(nc, list(traffic(400, seed=3))[1:])  # a worker, placements, sessions, requests
    await until_head(event_store, 400)
    head = await _settled(event_store)
    live = await rpc.request(nc, subjects.STATE, StateQuery(), ClusterState, timeout=5)
    assert live.events_applied == head
    assert live.manifest_version == 1
    assert live.counters.requests_completed > 0
    assert live == service.controller.cluster
    result = await asyncio.to_thread(CliRunner().invoke, cli, ["replay", "--json", "--database-url", database_url])
    assert result.exit_code == 0, result.output
    replayed = msgspec.json.decode(result.output)
    assert replayed["position"] == head
    assert msgspec.convert(replayed["state"], ClusterState) == live
    # an empty request body works too
    raw = await nc.request(subjects.STATE, b"", timeout=5)
    assert msgspec.json.decode(raw.data, type=ClusterState) == live


async def test_bootstrap_applies_the_manifest_once_and_a_restart_rebuilds_from_the_log(
    nc: Client, event_store: EventStore, start_cluster_state: StartService
) -> None:
    # no ticks in either: the traffic's workers are long silent, and a tick would record their loss
    # (the first instance's WorkerLost could then reach the log after it stopped, through the stream)
    first = await start_cluster_state(manifest_text=manifest_text(cluster="first"), tick_s=3600)
    assert first.controller.cluster.manifest_version == 1
    await _publish(nc, list(traffic(20, seed=4))[1:])  # traffic without its own ManifestApplied
    await until_head(event_store, 20)
    await _settled(event_store)  # the first instance's own decisions (placements) are in the log too
    await first.stop()
    logged = [r.event async for r in event_store.read_positions()]
    second = await start_cluster_state(manifest_text=manifest_text(cluster="second"), tick_s=3600)
    assert second.controller.cluster.cluster == "first"  # rebuilt from the log; the new file is ignored
    assert second.controller.cluster == fold(logged)
    applied = await event_store.query(types=["ManifestApplied"])
    assert [(r.event.version, r.event.cluster) for r in applied if isinstance(r.event, ManifestApplied)] == [
        (1, "first")
    ]


async def test_kill_9_and_restart_loses_and_duplicates_nothing(
    nc: Client, nats_url: str, database_url: str, event_store: EventStore
) -> None:
    env = {**os.environ, "NRT_NATS_URL": nats_url, "NRT_DATABASE_URL": database_url, "NRT_LOG_LEVEL": "WARNING"}
    events = list(traffic(6_000, seed=5))
    publisher = EventPublisher(nc)
    published = 0

    async def publish_until(n: int) -> None:
        nonlocal published
        while published < n:
            await publisher.publish(events[published])
            published += 1

    async def start() -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(sys.executable, "-m", "cluster_state", env=env)

    kills = 0
    proc = await start()
    try:
        for target in (1_500, 3_000, 4_500):
            # publish while cluster_state records, and kill it once it has recorded some of this round
            publishing = asyncio.create_task(publish_until(target))
            await until_head(event_store, target - 1_000, within=60)
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
            kills += 1
            await publishing
            proc = await start()
        await publish_until(len(events))
        await until_head(event_store, len(events), within=60)
        await asyncio.sleep(0.5)  # anything redelivered after the last append would show up now
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 15)
    assert kills == 3
    assert await event_store.head() == len(events)
    assert await _log_ids(event_store) == [e.event_id for e in events]
    assert (await event_store.verify()).ok
    stream = await nc.jetstream().stream_info(subjects.EVENTS_STREAM)
    assert await event_store.checkpoint("cluster_state") == stream.state.last_seq == len(events)


async def test_without_a_database_url_it_says_what_to_set(nats_url: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "NRT_DATABASE_URL"} | {"NRT_NATS_URL": nats_url}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "cluster_state", env=env, stderr=asyncio.subprocess.PIPE
    )
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2
    assert "NRT_DATABASE_URL is not set" in err.decode()
