"""A stream behind the log: cluster_state starts on a new events stream while PostgreSQL holds the history.

NATS lost its store, or NRT_NATS_URL names another server: the log (the source of truth)
has a manifest in force, live workers and placements, the stream has none of it. The
gateway, router and worker fold the stream, so cluster_state must put the current state
back on it, without the log recording anything twice.
"""

from __future__ import annotations

import asyncio
import contextlib

from faststream.nats import NatsBroker
from nats.aio.client import Client
from nats.js.errors import NotFoundError

from cluster_helpers import manifest_text
from nrt.adapters.bus import subjects
from nrt.adapters.bus.follow import EventFollower
from nrt.adapters.bus.jetstream import EventPublisher, ensure_events_stream
from nrt.adapters.store import EventStore
from nrt.core.api_keys import key_id_of, key_sha256
from nrt.core.events import ApiKeyRevoked, Event, RouterCalibrated, WorkerLost
from nrt.core.policies import Tuning
from nrt.core.routing import serving_workers
from nrt.core.state import ClusterState, fold
from nrt.core.vocabulary import KeyScope
from nrt.testing.traffic import traffic
from state_services import StartService, until_head

KEYS = {KeyScope.INFER: "an-infer-key-for-the-log", KeyScope.ADMIN: "an-admin-key-for-the-log"}
QUIET = Tuning(heartbeat_s=60.0)  # w1 of the traffic never heartbeats: keep it alive for the test's length


async def _recreate_stream(nc: Client) -> None:
    js = nc.jetstream()
    with contextlib.suppress(NotFoundError):
        await js.delete_stream(subjects.EVENTS_STREAM)
    await ensure_events_stream(js)


async def _last_seq(nc: Client) -> int:
    return (await nc.jetstream().stream_info(subjects.EVENTS_STREAM)).state.last_seq


async def _recorded_to_the_end(nc: Client, store: EventStore, within: float = 10.0) -> None:
    """Wait until the recorder has checkpointed the stream's last message."""
    deadline = asyncio.get_running_loop().time() + within
    while (checkpoint := await store.checkpoint("cluster_state")) < (end := await _last_seq(nc)):
        assert asyncio.get_running_loop().time() < deadline, f"recorded to {checkpoint}, the stream ends at {end}"
        await asyncio.sleep(0.05)


async def _followed(nc: Client, broker: NatsBroker) -> EventFollower:
    """What the gateway and router run, started now: a fold of the stream from its start, up to its end."""
    view = EventFollower(broker)
    await view.start()
    end = await _last_seq(nc)
    await view.wait_for(lambda _: view.sequence >= end, within=10)
    return view


async def _history(nc: Client, store: EventStore, start_cluster_state: StartService) -> list[Event]:
    """A log with a manifest in force, API keys (one revoked), a live worker, its placements, the
    router's calibrated floor, sessions and requests; then a new stream."""
    first = await start_cluster_state(manifest_text=manifest_text(), tuning=QUIET, keys=KEYS)
    publisher = EventPublisher(nc)
    for event in list(traffic(60, seed=11))[1:]:
        await publisher.publish(event)
    await publisher.publish(ApiKeyRevoked(key_id=key_id_of(key_sha256(KEYS[KeyScope.INFER]))))
    floor = RouterCalibrated(model_id="router", worker_id="w1", threshold=0.31, rule="centroid", examples=12)
    await publisher.publish(floor)
    await until_head(store, 61)
    # the head counts cluster_state's own decisions too: wait for the floor itself to be recorded
    deadline = asyncio.get_running_loop().time() + 20
    while not [r async for r in store.read_positions() if r.event.event_id == floor.event_id]:
        assert asyncio.get_running_loop().time() < deadline, "the router's floor was not recorded"
        await asyncio.sleep(0.05)
    await first.stop()
    logged = [r.event async for r in store.read_positions()]
    await _recreate_stream(nc)  # NATS without its store, or another NATS
    return logged


def _placements(state: ClusterState) -> dict[str, dict[str, tuple[str, int]]]:
    return {
        model_id: {w: (p.tier, p.bytes_held) for w, p in model.placements.items()}
        for model_id, model in state.models.items()
        if model.placements
    }


async def test_a_new_stream_gets_the_state_in_force_from_the_log_and_the_log_records_nothing_twice(
    nc: Client, broker: NatsBroker, event_store: EventStore, start_cluster_state: StartService
) -> None:
    logged = await _history(nc, event_store, start_cluster_state)
    in_force = fold(logged)
    assert in_force.manifest_version == 1
    assert serving_workers(in_force, "billing") == ("w1",)

    second = await start_cluster_state(manifest_text=manifest_text(), tuning=QUIET)
    view = await _followed(nc, broker)
    state = view.state
    # what /readyz and the router need: the manifest in force, and a live worker for each of its models
    assert view.manifest is not None
    assert (state.cluster, state.manifest_version, state.manifest_digest, state.manifest_text) == (
        in_force.cluster,
        in_force.manifest_version,
        in_force.manifest_digest,
        in_force.manifest_text,
    )
    assert not state.draining
    assert state.workers == in_force.workers
    assert _placements(state) == _placements(in_force)
    assert all(serving_workers(state, spec.id) == ("w1",) for spec in view.manifest.models)
    assert in_force.models["router"].calibrated is not None
    assert state.models["router"].calibrated == in_force.models["router"].calibrated  # /v1/models shows it
    assert len(in_force.api_keys) == 2
    assert state.api_keys == in_force.api_keys  # the gateway checks keys, revocations included
    assert [k.live for k in state.api_keys.values()] == [False, True]

    # the re-published events are the logged ones: the recorder skips them by id
    await _recorded_to_the_end(nc, event_store)
    after = [r.event async for r in event_store.read_positions()]
    assert [e.event_id for e in after] == [e.event_id for e in logged]
    assert len(await event_store.query(types=["ManifestApplied"])) == 1
    assert (await event_store.verify()).ok
    assert second.controller.cluster == in_force

    # a restart on a stream that holds the manifest in force re-publishes nothing
    await second.stop()
    sequence = await _last_seq(nc)
    await start_cluster_state(manifest_text=manifest_text(), tuning=QUIET)
    await asyncio.sleep(0.3)
    assert await _last_seq(nc) == sequence


async def test_what_the_new_stream_already_carries_is_not_undone_by_older_history(
    nc: Client, broker: NatsBroker, event_store: EventStore, start_cluster_state: StartService
) -> None:
    logged = await _history(nc, event_store, start_cluster_state)
    # w1 said goodbye on the new stream before cluster_state came back
    goodbye = WorkerLost(worker_id="w1", reason="shutdown")
    await EventPublisher(nc).publish(goodbye)
    service = await start_cluster_state(manifest_text=manifest_text(), tuning=QUIET)
    view = await _followed(nc, broker)
    assert view.manifest is not None
    assert view.state.manifest_digest == fold(logged).manifest_digest
    assert "w1" not in view.state.workers  # its older WorkerJoined is not re-published after the goodbye
    assert all(not serving_workers(view.state, spec.id) for spec in view.manifest.models)
    assert not service.controller.cluster.workers["w1"].alive
    await _recorded_to_the_end(nc, event_store)
    after = [r.event.event_id async for r in event_store.read_positions()]
    assert after == [*(e.event_id for e in logged), goodbye.event_id]
    assert (await event_store.verify()).ok
