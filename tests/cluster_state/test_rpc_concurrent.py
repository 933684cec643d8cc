"""rpc.serve(concurrent=True): a slow request does not hold up the next one (cluster_state's swap subject)."""

from __future__ import annotations

import asyncio

import msgspec
from nats.aio.client import Client

from nrt.bus import rpc


class Wait(msgspec.Struct, frozen=True):
    seconds: float
    name: str


class Done(msgspec.Struct, frozen=True):
    name: str


async def test_concurrent_serving_answers_a_fast_request_while_a_slow_one_runs(nc: Client) -> None:
    async def handler(request: Wait) -> Done:
        await asyncio.sleep(request.seconds)
        return Done(request.name)

    order: dict[str, list[str]] = {}
    for subject, concurrent in (("t.serial", False), ("t.concurrent", True)):
        await rpc.serve(nc, subject, Wait, handler, concurrent=concurrent)
        finished: list[str] = []

        async def call(request: Wait, subject: str = subject, finished: list[str] = finished) -> None:
            finished.append((await rpc.request(nc, subject, request, Done, timeout=5)).name)

        slow = asyncio.create_task(call(Wait(1.0, "slow")))
        await asyncio.sleep(0.1)
        await call(Wait(0.0, "fast"))
        await slow
        order[subject] = finished
    assert order == {"t.serial": ["slow", "fast"], "t.concurrent": ["fast", "slow"]}
