"""A bounded stream subscription refuses one request too many at once, with a clear, retryable error;
an accepted frame is skipped by a reader that only wants the answer."""

from __future__ import annotations

import asyncio

import msgspec
import pytest
from nats.aio.client import Client

from nrt.adapters.bus import rpc
from nrt.adapters.bus.errors import RemoteError


class Hold(msgspec.Struct, frozen=True):
    text: str


class Done(msgspec.Struct, frozen=True):
    text: str


async def test_a_full_subscription_answers_overloaded_at_once_and_spawns_no_task(nc: Client) -> None:
    release = asyncio.Event()

    async def held(ask: Hold, inbox: rpc.StreamInbox) -> None:
        await inbox.accept(Done(text="taken"))
        await release.wait()
        await inbox.send(Done(text=ask.text), last=True)

    await rpc.serve_stream(nc, "t.bounded", Hold, held, limit=2)
    running = [asyncio.create_task(_answer(nc, f"r{i}")) for i in range(2)]
    await asyncio.sleep(0.3)  # both are held by the handler
    started = asyncio.get_running_loop().time()
    with pytest.raises(RemoteError) as caught:
        await _answer(nc, "one too many")
    assert asyncio.get_running_loop().time() - started < 0.5
    assert (caught.value.code, caught.value.status, caught.value.retry_after) == ("overloaded", 429, 1.0)
    assert "the limit is 2" in caught.value.message
    release.set()
    assert await asyncio.gather(*running) == ["r0", "r1"]  # the accepted frames were skipped
    assert await _answer(nc, "room again") == "room again"


async def test_two_subjects_sharing_their_tasks_share_the_limit(nc: Client) -> None:
    """A worker's model subjects (the queue group's and its own) hold one bound between them."""
    release = asyncio.Event()

    async def held(ask: Hold, inbox: rpc.StreamInbox) -> None:
        await release.wait()
        await inbox.send(Done(text=ask.text), last=True)

    running: set[asyncio.Task[None]] = set()
    await rpc.serve_stream(nc, "t.shared", Hold, held, limit=2, running=running)
    await rpc.serve_stream(nc, "t.shared.own", Hold, held, limit=2, running=running)
    held_ones = [
        asyncio.create_task(_answer(nc, "a", "t.shared")),
        asyncio.create_task(_answer(nc, "b", "t.shared.own")),
    ]
    await asyncio.sleep(0.3)
    assert len(running) == 2
    with pytest.raises(RemoteError, match="the limit is 2") as caught:
        await _answer(nc, "one too many", "t.shared")
    assert caught.value.code == "overloaded"
    release.set()
    assert await asyncio.gather(*held_ones) == ["a", "b"]


async def _answer(nc: Client, text: str, subject: str = "t.bounded") -> str:
    chunks = [c async for c in rpc.stream(nc, subject, Hold(text=text), Done, 5, 5)]
    return chunks[-1].text
