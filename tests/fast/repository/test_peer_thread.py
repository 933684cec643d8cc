"""bench's peers run every call on one thread (bench.peers.on_peer_thread): llama.cpp's OpenMP team belongs to
the thread that runs it, and asyncio.to_thread's changing threads grew a second team that halved its speed."""

from __future__ import annotations

import asyncio
import threading

from bench.peers import on_peer_thread


def test_every_peer_call_runs_on_one_thread_whatever_else_runs_meanwhile() -> None:
    async def calls() -> set[int]:
        seen: set[int] = set()
        for _ in range(8):
            # other work on asyncio's default threads between the peer's calls, as bench.worker has
            await asyncio.gather(*(asyncio.to_thread(threading.get_ident) for _ in range(4)))
            seen.add(await on_peer_thread(threading.get_ident))
        return seen

    seen = asyncio.run(calls())
    assert len(seen) == 1
    assert seen != {threading.get_ident()}  # not the event loop's own thread


def test_a_peer_call_gets_its_arguments_and_returns_its_result() -> None:
    def scaled(value: int, *, by: int) -> int:
        return value * by

    assert asyncio.run(on_peer_thread(scaled, 6, by=7)) == 42
