"""The servers under a stack (NATS, PostgreSQL): given by URL, or embedded in its data directory
and kept running: one that dies is started again on the same port with the same data, so
that the services' URLs stay right and they reconnect by themselves."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from nrt.adapters.infra._server import EmbeddedServer

log = logging.getLogger("nrt.entrypoints.stack")

Report = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Backing:
    """A server the services use: its URL for them, and its handle when this stack runs it."""

    name: str
    url: str
    server: EmbeddedServer | None = None


@contextlib.contextmanager
def running(name: str, server: EmbeddedServer, url: Callable[[EmbeddedServer], str]) -> Iterator[Backing]:
    """Start ``server``, pin its port (a restart reuses it), stop it on the way out."""
    with server:
        server.pin_port()
        yield Backing(name, url(server), server)


async def watch(backings: Sequence[Backing], report: Report, every: float = 0.5, max_backoff: float = 5.0) -> None:
    """Restart each embedded server that exits, on its port and data, until cancelled; say so."""
    failures = {b.name: 0 for b in backings}
    while True:
        await asyncio.sleep(every)
        for backing in backings:
            server = backing.server
            if server is None or server.running:
                continue
            report(f"{backing.name} exited; starting it again on the same port and data")
            try:
                # the loop's executor thread lives as long as the loop: the server's parent-death
                # signal (nrt.adapters.infra._process.dies_with_parent) comes when the stack dies, not before
                await asyncio.to_thread(server.start)
            except Exception as exc:
                failures[backing.name] += 1
                delay = min(max_backoff, every * 2 ** failures[backing.name])
                report(f"{backing.name} did not start again ({exc}); retrying in {delay:.1f}s")
                await asyncio.sleep(delay)
                continue
            failures[backing.name] = 0
            report(f"{backing.name} is back ({server.startup_s or 0:.1f}s to start)")
