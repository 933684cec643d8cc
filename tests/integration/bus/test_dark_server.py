"""A NATS server that stops answering, the connection to it still open (its host cut off: no reset comes):
every NRT connection leaves it for another of the cluster's servers within seconds, not nats-py's minutes.

Real NATS; the dark server is a relay to it that holds every byte (``relay.Relay``), listed first.
"""

from __future__ import annotations

import asyncio
import time

import nats
from nats.aio.msg import Msg

from nrt.adapters.bus.connection import reconnecting
from nrt.adapters.bus.credentials import BusCredentials
from relay import Relay

LEFT_WITHIN_S = 10.0  # seconds, not minutes: its pings go unanswered 4-6 s (2 s apart, 2 outstanding), then a reconnect


async def echo(msg: Msg) -> None:
    await msg.respond(msg.data)


async def test_a_connection_leaves_a_server_that_stops_answering_for_another_within_seconds(nats_url: str) -> None:
    async with Relay(nats_url) as dark:
        options = reconnecting(f"{dark.url},{nats_url}", "leaver", credentials=BusCredentials())
        nc = await nats.connect([dark.url, nats_url], dont_randomize=True, **options)
        other = await nats.connect(nats_url)
        try:
            assert nc.connected_url is not None
            assert nc.connected_url.port == dark.port
            sub = await other.subscribe("dark.echo", cb=echo)
            await other.flush()
            assert (await nc.request("dark.echo", b"before", timeout=5)).data == b"before"

            dark.cut()
            cut = time.monotonic()
            while nc.stats["reconnects"] == 0 or not nc.is_connected:
                assert time.monotonic() - cut < LEFT_WITHIN_S, f"still on the dark server after {LEFT_WITHIN_S:g}s"
                await asyncio.sleep(0.1)
            assert nc.connected_url is not None
            assert nc.connected_url.port != dark.port
            assert (await nc.request("dark.echo", b"after", timeout=5)).data == b"after"
            await sub.unsubscribe()
        finally:
            await nc.close()
            await other.close()
