"""Event store benchmark.

Appends 100k events in batches through ``EventStore.append`` (idempotency check, version
check, hash chain, COPY) and compares it with the floor: a raw psycopg COPY of the very
same rows, in the same batches and transactions, into an identical table, measured in
the same run. Then replays the log: PostgreSQL read + decode + fold, and the fold alone.

    python -m bench.event_store [--events 100000] [--batch 1000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import time

import psycopg

from bench.common import Timer, fresh_database, postgres, report
from nrt.adapters.infra.pgurl import to_libpq
from nrt.adapters.store import EventStore
from nrt.adapters.store.postgres import _COPY_SQL
from nrt.core.events import Event
from nrt.core.state import fold
from nrt.testing.traffic import traffic


def _batches(events: list[Event], size: int) -> list[list[Event]]:
    return [events[i : i + size] for i in range(0, len(events), size)]


async def _floor(url: str, batches: list[list[Event]]) -> float:
    """Raw COPY of the rows the store would write, one transaction per batch."""
    payloads: list[bytes] = []
    versions: dict[str, int] = {}
    head, prev = 0, bytes(32)
    for batch in batches:
        data, _, (head, prev) = EventStore._rows(batch, versions, head, prev)
        payloads.append(data)
    timer = Timer()
    async with await psycopg.AsyncConnection.connect(to_libpq(url)) as conn:
        with timer.run():
            for data in payloads:
                async with conn.transaction(), conn.cursor() as cursor, cursor.copy(_COPY_SQL) as copy:
                    await copy.write(data)
    return timer.seconds


async def _append(url: str, batches: list[list[Event]]) -> float:
    store = EventStore.connect(url)
    timer = Timer()
    try:
        with timer.run():
            for batch in batches:
                await store.append(batch)
    finally:
        await store.close()
    return timer.seconds


async def _replay(url: str) -> tuple[float, int]:
    store = EventStore.connect(url)
    try:
        started = time.perf_counter()
        events = [r.event async for r in store.read_positions(page=10_000)]
        state = fold(events)
        return time.perf_counter() - started, state.events_applied
    finally:
        await store.close()


async def main(n_events: int, batch: int, rounds: int) -> None:
    events = list(traffic(n_events))
    batches = _batches(events, batch)
    print(f"event store: {n_events:,} events in batches of {batch}, best of {rounds} rounds", flush=True)
    with postgres() as server:
        floor_s, append_s = float("inf"), float("inf")
        for _ in range(rounds):
            with fresh_database(server) as floor_db:
                floor_s = min(floor_s, await _floor(floor_db, batches))
            with fresh_database(server) as store_db:
                append_s = min(append_s, await _append(store_db, batches))
                replay_s, applied = await _replay(store_db)
        assert applied == n_events
    floor_rate, append_rate = n_events / floor_s, n_events / append_s
    report("raw psycopg COPY (floor)", floor_rate, "events/s")
    report("EventStore.append, batched", append_rate, "events/s", append_rate / floor_rate, "COPY floor", ">= 0.5")
    fold_started = time.perf_counter()
    fold(events)
    fold_rate = n_events / (time.perf_counter() - fold_started)
    replay_rate = n_events / replay_s
    report("replay: read + decode + fold", replay_rate, "events/s", replay_rate / append_rate, "append rate")
    report("fold alone (in memory)", fold_rate, "events/s", fold_rate / append_rate, "append rate")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    asyncio.run(main(args.events, args.batch, args.rounds))
