"""A worker whose NATS connection is made again says so in its heartbeats, and the gateway ends at once the
requests it held and those no worker had taken yet: what was on the old connection (a request forwarded to it,
a frame it sent) may be gone with the server, and waiting for it ended only at a deadline (a 504 after 30 s in
``test_fault_nats_cluster_node``, one run in three). Real NATS, the real worker and the gateway's own watcher;
the worker's connection goes through a relay that closes it, as a server killed does.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from nats.aio.client import Client

from api_gateway import worker_reconnects
from api_gateway.reply_stream import Inboxes, WorkerLost
from api_gateway.worker_reconnects import ReconnectCounts
from nrt.adapters.bus.broker import start_broker
from nrt.adapters.bus.connection import processed
from nrt.hosting.resources import detect
from nrt.hosting.worker import Worker
from relay import Relay


@pytest.fixture
async def relayed(nats_url: str, nrt_home: Path) -> AsyncIterator[tuple[Relay, Worker]]:
    async with Relay(nats_url) as relay:
        broker = await start_broker(relay.url, "worker behind a relay")
        worker = Worker(broker, detect(), worker_id="w-relayed", max_batch_size=2)
        await worker.start()
        try:
            yield relay, worker
        finally:
            await worker.stop()
            await broker.stop()


async def test_a_worker_reconnected_to_nats_ends_what_it_held_at_the_gateway(
    nc: Client, relayed: tuple[Relay, Worker]
) -> None:
    relay, worker = relayed
    inboxes = Inboxes(nc)
    await inboxes.start()
    await worker_reconnects.watch(nc, inboxes, ReconnectCounts())
    await processed(nc)  # the server has the subscriptions before the worker beats (another connection)
    held, queue_held = inboxes.open()
    inboxes.taken(held, "w-relayed")
    elsewhere, queue_elsewhere = inboxes.open()
    inboxes.taken(elsewhere, "w-other")
    await worker.heartbeat()  # seen first: nothing ends
    await asyncio.sleep(0.3)
    assert queue_held.empty()
    await worker.heartbeat()  # the same count: nothing ends
    await asyncio.sleep(0.3)
    assert queue_held.empty()

    relay.reset()  # the server "goes away": the worker's connection closes, and it connects again
    connection = worker.nc
    deadline = time.monotonic() + 10
    while connection.stats["reconnects"] < 1 or not connection.is_connected:
        assert time.monotonic() < deadline, "the worker did not connect again within 10 s"
        await asyncio.sleep(0.05)
    await worker.heartbeat()
    error = await asyncio.wait_for(queue_held.get(), 5)
    assert isinstance(error, WorkerLost)
    assert error.worker_id == "w-relayed"
    assert "lost its connection to NATS" in error.message
    assert queue_elsewhere.empty()  # another worker's request goes on
