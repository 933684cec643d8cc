"""The log at scale: the events stream keeps only its recent part, PostgreSQL all of it.

With a tiny retention limit the stream drops its start (the manifest, the keys) while the
log keeps everything. A follower started then (the gateway's, router_svc's) cannot fold the
stream from its beginning: it takes cluster_state's fold placed on the stream and follows the
rest, and ends up with the state a fold of the whole log from its start gives. Real NATS and
PostgreSQL.
"""

from __future__ import annotations

import asyncio

import pytest
from faststream.nats import NatsBroker
from msgspec.structs import replace
from nats.aio.client import Client

from cluster_helpers import manifest_text
from cluster_state.key_registry import create_key
from cluster_state.outbox_relay import OutboxRelay
from cluster_state.service import ClusterStateService
from nrt.adapters.bus import subjects
from nrt.adapters.bus.follow import EventFollower
from nrt.adapters.bus.jetstream import EventPublisher, StreamLimits
from nrt.adapters.store import EventStore
from nrt.core.eventlog import AppendResult, Checkpoint
from nrt.core.events import (
    CONTROL_PLANE,
    Event,
    RequestAdmitted,
    RequestCompleted,
    RequestRouted,
    RouterCalibrated,
    SessionKvEvicted,
    SessionOpened,
    SessionTouched,
)
from nrt.core.policies import Tuning
from nrt.core.protocol import CreateKey
from nrt.core.state import ClusterState, fold
from nrt.core.state.stream import control_plane
from nrt.core.vocabulary import KeyScope
from nrt.entrypoints.cli.audit import replay_log
from nrt.testing.traffic import traffic
from state_services import StartService

KEYS = {KeyScope.INFER: "an-infer-key-kept-by-the-log", KeyScope.ADMIN: "an-admin-key-kept-by-the-log"}
QUIET = Tuning(heartbeat_s=60.0)
LIMITS = StreamLimits(max_msgs=60, max_age_s=0)
# requests and sessions: facts that ask cluster_state for no decision (no worker joins: nothing to place)
REQUEST_PLANE = (RequestAdmitted, RequestRouted, RequestCompleted, SessionOpened, SessionTouched, SessionKvEvicted)


def _requests(n: int, seed: int) -> list[Event]:
    return [e for e in traffic(n, seed=seed) if isinstance(e, REQUEST_PLANE)]


async def _publish(nc: Client, store: EventStore, events: list[Event], chunk: int = 20) -> None:
    """Publish ``events`` a chunk at a time, each recorded before the next: the recorder never falls further
    behind than the stream's tiny limit (what the stream drops before it is recorded never reaches the log)."""
    publisher = EventPublisher(nc)
    for start in range(0, len(events), chunk):
        for event in events[start : start + chunk]:
            await publisher.publish(event)
        await _settled(nc, store)


async def _last_seq(nc: Client) -> int:
    return (await nc.jetstream().stream_info(subjects.EVENTS_STREAM)).state.last_seq


async def _settled(nc: Client, store: EventStore, within: float = 20.0) -> int:
    """Wait until the recorder has checkpointed the stream's end and the decision outbox is empty; the end."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        published = not await store.unpublished()  # first: a decision leaves the outbox once the stream has it
        end = await _last_seq(nc)
        if published and await store.checkpoint("cluster_state") >= end:
            return end
        assert asyncio.get_running_loop().time() < deadline, f"the recorder did not reach the stream's end ({end})"
        await asyncio.sleep(0.05)


async def _followed_to(follower: EventFollower, end: int) -> ClusterState:
    return await follower.wait_for(lambda _: follower.sequence >= end, within=10)


async def _whole_log(store: EventStore) -> ClusterState:
    """A fold of the log from position 1 (no snapshot)."""
    return fold([r.event async for r in store.read_positions()])


def _position_free(state: ClusterState) -> ClusterState:
    return replace(state, events_applied=0, last_event_at=None)


async def _behind_the_stream(
    nc: Client, store: EventStore, start_cluster_state: StartService, n: int = 300
) -> ClusterStateService:
    """cluster_state with a manifest and keys, then enough requests that the stream drops its start."""
    service = await start_cluster_state(manifest_text=manifest_text(), tuning=QUIET, keys=KEYS, stream_limits=LIMITS)
    floor = RouterCalibrated(model_id="router", worker_id="w1", threshold=0.3, rule="centroid", examples=8)
    await _publish(nc, store, [*_requests(n, seed=5), floor])
    stream = await nc.jetstream().stream_info(subjects.EVENTS_STREAM)
    assert stream.config.max_msgs == LIMITS.max_msgs  # cluster_state applied its limits to the stream
    assert stream.state.messages <= LIMITS.max_msgs
    assert stream.state.first_seq > LIMITS.max_msgs  # the manifest and the keys are gone from the stream
    assert await store.head() > LIMITS.max_msgs  # and kept by the log
    return service


async def test_a_follower_behind_the_stream_starts_from_cluster_states_fold_and_folds_the_rest(
    nc: Client, broker: NatsBroker, event_store: EventStore, start_cluster_state: StartService
) -> None:
    service = await _behind_the_stream(nc, event_store, start_cluster_state)

    follower = EventFollower(broker)  # the gateway's view, started now
    await follower.start()
    assert follower.snapshot is not None
    state = await _followed_to(follower, await _last_seq(nc))
    assert follower.manifest is not None  # the manifest in force, though the stream lost its ManifestApplied
    assert len(state.api_keys) == 2
    whole = await _whole_log(event_store)
    assert state == service.controller.cluster == whole == (await replay_log(event_store, None)).state

    control = EventFollower(broker)  # the gateway's and router_svc's: the control plane only
    await control.start(types=CONTROL_PLANE)
    assert control.state == control_plane(whole)
    assert control.manifest is not None
    assert control.state.models["router"].calibrated is not None

    # the stream goes on: both follow it live, and still hold what the log folds to
    more = _requests(150, seed=6)
    floor = RouterCalibrated(model_id="router", worker_id="w1", threshold=0.45, rule="centroid", examples=9)
    await _publish(nc, event_store, [*more, floor])
    end = await _settled(nc, event_store)
    state = await _followed_to(follower, end)
    whole = await _whole_log(event_store)
    assert state == service.controller.cluster == whole
    assert state.events_applied == await event_store.head()
    await control.wait_for(lambda s: s.models["router"].calibrated == floor, within=10)
    assert _position_free(control.state) == _position_free(control_plane(whole))


async def test_decisions_the_stream_carries_after_the_snapshot_are_folded_once(
    nc: Client, broker: NatsBroker, event_store: EventStore, start_cluster_state: StartService
) -> None:
    """cluster_state appends its decisions before it publishes them: one in the snapshot is skipped when the
    stream brings it."""
    service = await _behind_the_stream(nc, event_store, start_cluster_state, n=150)
    release = _hold(service.relay)
    key = await create_key(service.controller, CreateKey(name="late", scope=KeyScope.INFER, key_sha256="ab" * 32))
    (pending,) = await event_store.unpublished()
    assert key.key_id in service.controller.cluster.api_keys  # in the fold, not yet on the stream

    follower = EventFollower(broker)
    await follower.start()
    assert follower.snapshot is not None
    assert follower.snapshot.ahead == (pending.event_id,)
    assert key.key_id in follower.state.api_keys

    release.set()
    end = await _settled(nc, event_store)
    state = await _followed_to(follower, end)
    assert follower.sequence == end  # the key's message came ...
    assert state == service.controller.cluster == await _whole_log(event_store)  # ... and was not folded twice


async def test_a_restart_on_a_stream_that_dropped_its_start_puts_nothing_back_on_it(
    nc: Client, broker: NatsBroker, event_store: EventStore, start_cluster_state: StartService
) -> None:
    """The stream lacks the manifest in force because its limits dropped it, not because it is new: no re-seed
    (whose copies a running follower would fold a second time); a follower starts from the snapshot."""
    first = await _behind_the_stream(nc, event_store, start_cluster_state, n=150)
    await first.stop()
    end = await _last_seq(nc)
    again = await start_cluster_state(manifest_text=manifest_text(), tuning=QUIET, keys=KEYS, stream_limits=LIMITS)
    await asyncio.sleep(0.3)
    assert await _last_seq(nc) == end
    follower = EventFollower(broker)
    await follower.start()
    assert follower.snapshot is not None
    state = await _followed_to(follower, end)
    assert state == again.controller.cluster == await _whole_log(event_store)


async def test_a_follower_of_a_whole_stream_folds_it_from_its_start(
    nc: Client, broker: NatsBroker, event_store: EventStore, start_cluster_state: StartService
) -> None:
    """Nothing dropped yet: no snapshot, the stream from sequence 1."""
    service = await start_cluster_state(manifest_text=manifest_text(), tuning=QUIET, keys=KEYS, stream_limits=LIMITS)
    await _publish(nc, event_store, _requests(20, seed=7))
    end = await _settled(nc, event_store)
    assert (await nc.jetstream().stream_info(subjects.EVENTS_STREAM)).state.first_seq == 1
    follower = EventFollower(broker)
    await follower.start()
    state = await _followed_to(follower, end)
    assert follower.snapshot is None
    assert state == service.controller.cluster


def _hold(relay: OutboxRelay) -> asyncio.Event:
    """Keep ``relay`` from publishing until the returned event is set (decisions stay in the outbox)."""
    release = asyncio.Event()
    publish = relay.publish_pending

    async def held() -> int:
        await release.wait()
        return await publish()

    relay.publish_pending = held  # type: ignore[method-assign]
    return release


async def test_what_the_stream_drops_before_it_is_recorded_is_counted_and_logged(
    nc: Client, event_store: EventStore, start_cluster_state: StartService, caplog: pytest.LogCaptureFixture
) -> None:
    """The limits must exceed how far the recorder may fall behind; when they do not, the loss is said."""
    service = await start_cluster_state(manifest_text=manifest_text(), tuning=QUIET, stream_limits=LIMITS)
    await _settled(nc, event_store)
    head = await event_store.head()
    release = asyncio.Event()
    append = service.recorder.append

    async def stalled(events: list[Event], checkpoint: Checkpoint) -> AppendResult:
        await release.wait()
        return await append(events, checkpoint)

    service.recorder.append = stalled  # PostgreSQL stalls while the traffic goes on
    events = _requests(130, seed=8)[:101]
    publisher = EventPublisher(nc)
    await publisher.publish(events[0])
    await asyncio.sleep(0.3)  # the recorder holds it, waiting for its append
    for event in events[1:]:
        await publisher.publish(event)
    release.set()
    await _settled(nc, event_store)
    assert service.recorder.lost == 100 - LIMITS.max_msgs
    assert service.metrics.registry.get_sample_value("nrt_events_lost_total") == 100 - LIMITS.max_msgs
    assert "dropped by the stream's retention limits before they were recorded" in caplog.text
    assert await event_store.head() == head + 1 + LIMITS.max_msgs
