"""bus.serve(max_workers=...): a slow request does not hold up the next one (cluster_state's swap subject)."""

from __future__ import annotations

import asyncio

import msgspec
from faststream.nats import NatsBroker

from nrt.adapters.bus import broker as bus


class Wait(msgspec.Struct, frozen=True):
    seconds: float
    name: str


class Done(msgspec.Struct, frozen=True):
    name: str


async def test_concurrent_serving_answers_a_fast_request_while_a_slow_one_runs(broker: NatsBroker) -> None:
    async def handler(request: Wait) -> Done:
        await asyncio.sleep(request.seconds)
        return Done(request.name)

    order: dict[str, list[str]] = {}
    for subject, workers in (("t.serial", 1), ("t.concurrent", 4)):
        await bus.serve(broker, subject, handler, max_workers=workers)
        finished: list[str] = []

        async def call(request: Wait, subject: str = subject, finished: list[str] = finished) -> None:
            finished.append((await bus.call(broker, subject, request, Done, timeout=5)).name)

        slow = asyncio.create_task(call(Wait(1.0, "slow")))
        await asyncio.sleep(0.1)
        await call(Wait(0.0, "fast"))
        await slow
        order[subject] = finished
    assert order == {"t.serial": ["slow", "fast"], "t.concurrent": ["fast", "slow"]}
