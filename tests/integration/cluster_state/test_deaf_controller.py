"""cluster_state whose NATS server stops answering, its connection still open (the server's host cut off: no
reset comes, and nats-py notices only after two missed pings minutes apart): it hears every worker fall
silent at once. It decides nothing until its server answers again, rather than declaring the live workers
lost (and the requests of the live gateways ``owner_lost``); once it hears again, it decides as before.

CI's multi-host run of 2026-12-07 found it: the leader's connection was on the NATS node of the host cut off,
and a request its client was served was ended ``owner_lost``. Here the cut is a relay between cluster_state and
the real NATS server that stops passing bytes and later passes them again (what TCP does across a cut link
that heals: the bytes wait, nothing is lost); the workers talk to NATS directly.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from cluster_state.service import ClusterStateService
from nrt.adapters.bus.broker import start_broker
from nrt.adapters.store import EventStore
from nrt.core.events import WorkerLost
from nrt.core.vocabulary import WorkerRole
from relay import Relay
from state_services import Workers
from worker_helpers import ALL_PLACED, FAST, placed_as, worker_manifest


@contextlib.asynccontextmanager
async def behind_relay(
    nats_url: str, database_url: str, manifest: str
) -> AsyncIterator[tuple[Relay, ClusterStateService]]:
    async with Relay(nats_url) as relay:
        broker = await start_broker(relay.url, "cluster_state behind a relay")
        service = ClusterStateService(broker, database_url, manifest_text=manifest, tuning=FAST, tick_s=0.2)
        try:
            await asyncio.wait_for(service.start(), 30)
            yield relay, service
        finally:
            relay.heal()
            await service.stop()
            await broker.stop()


async def lost_workers(store: EventStore) -> list[str]:
    return [r.event.worker_id for r in await store.query(types=["WorkerLost"]) if isinstance(r.event, WorkerLost)]


async def test_a_controller_cut_off_from_its_nats_server_declares_no_one_lost_and_decides_again_once_healed(
    nats_url: str,
    database_url: str,
    workers: Workers,
    llama_copies: Callable[[str], str],
    event_store: EventStore,
) -> None:
    await workers.start("r1", role=WorkerRole.ROUTER)
    w1 = await workers.start("w1")
    async with behind_relay(nats_url, database_url, worker_manifest(llama_copies)) as (relay, service):
        await service.controller.wait_for(placed_as(ALL_PLACED), within=60)

        relay.cut()
        await asyncio.sleep(FAST.lost_after_s * 3)  # twice as long as a silent worker is given, and more
        assert await lost_workers(event_store) == []
        assert all(worker.alive for worker in service.controller.cluster.workers.values())
        relay.heal()

        await asyncio.sleep(FAST.lost_after_s * 2)  # hearing again: the workers beat on, no one is lost
        assert await lost_workers(event_store) == []
        await w1.crash()  # and a worker that does fall silent is declared lost, as before
        state = await service.controller.wait_for(lambda s: not s.workers["w1"].alive, within=30)
        assert state.workers["r1"].alive
        assert await lost_workers(event_store) == ["w1"]
