"""Real HTTP servers for the remote tier's tests, on free local ports, in the test's event loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator

import uvicorn
from litestar import Litestar

from nrt.adapters.infra import free_port


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # in-process: leave the test runner's signal handling alone


@contextlib.asynccontextmanager
async def serve_app(app: Litestar, port: int | None = None) -> AsyncIterator[str]:
    """``app`` served by uvicorn on ``port`` (a free one if None) until the block ends: its base URL."""
    port = port or free_port()
    server = _Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()  # it could not start: say why
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


@contextlib.asynccontextmanager
async def hang_up_after_request() -> AsyncIterator[tuple[str, list[bytes]]]:
    """A server that reads each request whole and closes the connection without answering:
    its base URL, and the requests it received (each had reached the server)."""
    received: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
        )
        received.append(head + await reader.readexactly(length))
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"http://127.0.0.1:{port}", received
