"""nrt.adapters.bus.hearing on a stand-in connection: one ping waits at a time, answered or not; a reconnect
starts a new one; a disconnected connection is not heard."""

from __future__ import annotations

import asyncio
from typing import Any

from nrt.adapters.bus.hearing import Hearing


class _Connection:
    """A connection whose pings are answered when the test says (``answer``)."""

    def __init__(self) -> None:
        self.is_connected = True
        self.stats: dict[str, Any] = {"reconnects": 0}
        self.pings: list[asyncio.Future[None]] = []

    async def flush(self, timeout: int) -> None:  # noqa: ASYNC109 (nats-py's signature)
        pong: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.pings.append(pong)
        await pong

    def answer(self) -> None:
        for pong in self.pings:
            if not pong.done():
                pong.set_result(None)


async def test_a_ping_unanswered_is_waited_for_again_not_sent_again() -> None:
    connection = _Connection()
    hearing = Hearing(connection, within_s=0.05)  # type: ignore[arg-type]
    assert not await hearing.answers()
    assert not await hearing.answers()
    assert len(connection.pings) == 1  # the same ping, still waiting: nothing piles up behind a cut
    connection.answer()
    assert await hearing.answers()
    asyncio.get_running_loop().call_later(0.01, connection.answer)
    assert await hearing.answers()  # a new ping, answered in time
    assert len(connection.pings) == 2


async def test_a_reconnect_drops_the_waiting_ping_and_a_disconnected_connection_is_not_heard() -> None:
    connection = _Connection()
    hearing = Hearing(connection, within_s=0.05)  # type: ignore[arg-type]
    assert not await hearing.answers()
    connection.stats["reconnects"] = 1  # the waiting ping's pong will never come
    assert not await hearing.answers()
    assert len(connection.pings) == 2
    assert connection.pings[0].cancelled()
    connection.is_connected = False
    assert not await hearing.answers()
    assert len(connection.pings) == 2
    hearing.close()
    assert connection.pings[1].cancelled()
