"""A TCP relay a test can cut and heal: what a link to a host cut off does to a connection over it.

Cut, it holds the bytes both ways and keeps both sockets open (no reset: the peer learns nothing); healed, it
passes them on, none lost (what TCP does across a link that comes back). Reset, it closes every connection
through it (what a server killed does to its clients: they connect again).
"""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import urlsplit


class Relay:
    """A TCP relay to ``target`` whose bytes can be held (:meth:`cut`) and let through again (:meth:`heal`)."""

    def __init__(self, target: str) -> None:
        parts = urlsplit(target)
        self.target_host, self.target_port = parts.hostname or "127.0.0.1", parts.port or 4222
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.writers: list[asyncio.StreamWriter] = []  # both ends of every connection through it
        self.server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def cut(self) -> None:
        self.flowing.clear()

    def heal(self) -> None:
        self.flowing.set()

    def reset(self) -> None:
        """Close every connection through the relay (it goes on accepting new ones)."""
        writers, self.writers = self.writers, []
        for writer in writers:
            writer.close()

    async def __aenter__(self) -> Relay:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self.server is not None
        self.server.close()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection(self.target_host, self.target_port)
        self.writers += [writer, upstream_writer]
        for source, sink in ((reader, upstream_writer), (upstream_reader, writer)):
            task = asyncio.create_task(self._pipe(source, sink))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _pipe(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await source.read(65536):
                await self.flowing.wait()  # cut: the bytes wait here (and in the kernel's buffers)
                sink.write(data)
                await sink.drain()
        sink.close()
