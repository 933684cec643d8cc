"""Whether a NATS connection's server answers: a ping's round trip, asked again and again without harm.

A connection can look up and be dead: its server's host cut off, no reset coming; nats-py notices only after
two missed pings of its own, minutes apart. A process that acts on what it does not hear (cluster_state
declares silent workers and gateways lost) must first know that it can hear.

nats-py's ``flush(timeout)`` cannot be that question: on its timeout it cancels the ping's future but leaves
it queued, and the pong that comes later (the cut healed) meets the cancelled future, raises, and ends the
connection's read loop without closing it: a connection that says it is connected and reads nothing more.
So the ping here is never timed out by nats-py: one flush at a time is left waiting for its pong, and each
question waits for it a bounded while; a reconnect (which drops the queued pings unanswered) starts a new one.
"""

from __future__ import annotations

import asyncio

from nats.aio.client import Client

NEVER_S = 10**9  # nats-py's own timeout of the waiting ping: none (see the module's docstring)


class Hearing:
    """Asks whether ``connection``'s server answers within ``within_s``."""

    def __init__(self, connection: Client, within_s: float) -> None:
        self.connection = connection
        self.within_s = within_s
        self._ping: asyncio.Task[None] | None = None
        self._reconnects = -1  # the connection's reconnect count when the waiting ping was sent

    async def answers(self) -> bool:
        """Whether the server answered a ping (the one waiting, or a new one) within ``within_s``."""
        connection = self.connection
        if not connection.is_connected:
            return False
        reconnects = int(connection.stats["reconnects"])
        if self._ping is not None and reconnects != self._reconnects:
            self._drop()  # sent before a reconnect: its pong will never come
        if self._ping is None:
            self._ping = asyncio.create_task(connection.flush(timeout=NEVER_S), name="nats hearing ping")
            self._reconnects = reconnects
        done, _ = await asyncio.wait({self._ping}, timeout=self.within_s)
        if not done:
            return False
        ping, self._ping = self._ping, None
        return not ping.cancelled() and ping.exception() is None

    def close(self) -> None:
        """Stop waiting (the connection is being closed)."""
        self._drop()

    def _drop(self) -> None:
        if self._ping is not None:
            self._ping.cancel()
            self._ping = None
