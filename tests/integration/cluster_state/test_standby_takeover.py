"""A standby cluster_state takes over from a leader that died without releasing its lease, and a deposed leader's
fetch from the shared durable consumer loses nothing: real NATS and PostgreSQL, both services in this process."""

from __future__ import annotations

import asyncio
import time

from faststream.nats import NatsBroker
from nats.aio.client import Client

from cluster_state.recorder import CONSUMER
from cluster_state.service import ClusterStateService
from nrt.adapters.bus import subjects
from nrt.adapters.bus.jetstream import EventPublisher
from nrt.adapters.store import EventStore
from nrt.core.eventlog import LeaseTerms
from nrt.core.events import Event
from nrt.core.state import fold
from nrt.testing.traffic import traffic
from state_services import StartService, until_head

QUICK = LeaseTerms(lease_s=1.0, renew_s=0.25)


async def _publish(nc: Client, events: list[Event]) -> None:
    publisher = EventPublisher(nc)
    for event in events:
        await publisher.publish(event)


async def _log_ids(store: EventStore) -> list[str]:
    return [r.event.event_id async for r in store.read_positions()]


async def test_messages_a_deposed_leader_fetched_are_read_from_the_stream_not_lost(
    nc: Client, event_store: EventStore, start_cluster_state: StartService
) -> None:
    """The successor re-creates the durable consumer under the same name; a deposed leader that wakes up and
    fetches from it takes messages it never acknowledges. The successor's acknowledgement of a later message
    would acknowledge them too (AckPolicy.ALL): it reads the gap from the stream and records it in order."""
    service = await start_cluster_state()
    first = list(traffic(60, seed=7))
    await _publish(nc, first)
    await until_head(event_store, 60)

    service.recorder.may_fetch = lambda: False  # the successor between two fetches
    await asyncio.sleep(0.3)
    js = nc.jetstream()
    thief = await js.pull_subscribe_bind(durable=CONSUMER, stream=subjects.EVENTS_STREAM)  # the deposed leader
    second = list(traffic(40, seed=8))[1:]
    await _publish(nc, second)
    stolen = await thief.fetch(15, timeout=2)
    assert len(stolen) == 15  # delivered to the deposed leader, never acknowledged
    service.recorder.may_fetch = lambda: True

    await until_head(event_store, 60 + len(second))
    await asyncio.sleep(0.3)
    assert await _log_ids(event_store) == [e.event_id for e in [*first, *second]]
    assert service.recorder.lost == 0
    assert (await event_store.verify()).ok
    assert service.controller.cluster == fold([*first, *second])
    await thief.unsubscribe()


async def test_a_standby_takes_over_from_a_leader_that_died_holding_its_lease(
    nc: Client, broker: NatsBroker, database_url: str, event_store: EventStore
) -> None:
    leader = ClusterStateService(broker, database_url, lease=QUICK, holder="leader", tick_s=0.2)
    standby = ClusterStateService(broker, database_url, lease=QUICK, holder="standby", tick_s=0.2)
    try:
        await asyncio.wait_for(leader.start(), 30)
        waiting = asyncio.ensure_future(standby.start())
        first = list(traffic(80, seed=9))
        await _publish(nc, first)
        await until_head(event_store, 80)
        await asyncio.sleep(QUICK.lease_s)
        assert not waiting.done()  # the leader renews: the standby waits
        assert (leader.leadership.epoch(), standby.leadership.epoch()) == (1, 0)

        leader.leadership.lease = None  # it dies without releasing: the lease runs out on its own
        await leader.stop()
        died_at = time.monotonic()
        second = list(traffic(50, seed=10))[1:]
        await _publish(nc, second)  # while nobody records: the stream keeps them
        await asyncio.wait_for(waiting, 10)
        took_over = time.monotonic() - died_at
        assert took_over < QUICK.lease_s + QUICK.campaign_s + 2.0, took_over
        await until_head(event_store, 80 + len(second))
        await asyncio.sleep(0.3)
        assert await _log_ids(event_store) == [e.event_id for e in [*first, *second]]
        assert standby.controller.cluster == fold([*first, *second])
        lease = await event_store.leader()
        assert lease is not None
        assert (lease.epoch, lease.holder) == (2, "standby")
        assert (leader.leadership.epoch(), standby.leadership.epoch()) == (0, 2)  # what their health replies say
    finally:
        await leader.stop()
        await standby.stop()
