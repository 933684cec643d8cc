"""Replay benchmark: replay speed over a long log, and how its cost grows.

Generates ``--events`` events of realistic traffic (``nrt.testing.traffic``) and appends
them in batches through ``EventStore.append`` (the real append path: hash chain, COPY),
streaming the generator so the log is never held in memory. Then replays the log as
``nrt replay`` does: ``EventStore.replay`` pages in position order, decode, and
the pure ``evolve`` fold, timing every ``--slice`` of events. Per slice it prints the time,
events/s and the ratio of that slice's time per event to the first slice's (linear growth
keeps every ratio near 1.0). Overall it prints the replay rate against the floor, measured
in the same run: a raw psycopg read of the same rows' payload (``SELECT body::text`` through
a server-side cursor, no decode, no fold). Each slice and the totals are the best of
``--rounds`` rounds; floor and replay alternate within a round.

Then the cost of starting from a snapshot (``--sizes``): the log is grown to each size in turn
(the same traffic, continued), a snapshot is saved ``--snapshot-lag`` events behind the head (where
cluster_state's writer leaves it, at most ``snapshot_every_events`` behind), and at each size it
times cluster_state's rebuild on restart (``cluster_state.snapshots.rebuild``: load the snapshot,
fold the rest; a fresh store connection included) and ``nrt replay`` of the latest state
(``nrt.entrypoints.cli.audit.replay_log``), best of ``--rounds``, with each size's time against the smallest
size's (flat cost: near 1.0) and a full replay's rate at that size.

    python -m bench.replay [--events 1000000] [--slice 100000] [--batch 1000] [--page 10000] [--rounds 3]
    python -m bench.replay --sizes 1000000 5000000 [--snapshot-lag 5000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import resource
import time
from collections.abc import Iterator
from typing import Any, cast

import psycopg

from bench.common import Timer, fresh_database, postgres, report
from cluster_state import snapshots
from cluster_state.controller import Controller, utc_now
from nrt.adapters.infra.pgurl import to_libpq
from nrt.adapters.store import EventStore
from nrt.core.events import Event
from nrt.core.policies import ControlState
from nrt.core.state import ClusterState, evolve, snapshot
from nrt.entrypoints.cli.audit import replay_log
from nrt.testing.traffic import traffic


def _batches(events: Iterator[Event], size: int) -> Iterator[list[Event]]:
    """``events`` in lists of ``size``, one list alive at a time."""
    while batch := list(itertools.islice(events, size)):
        yield batch


def _slices(n_events: int, size: int) -> list[int]:
    """The number of events in each slice: ``size`` each, the last one possibly short."""
    return [min(size, n_events - start) for start in range(0, n_events, size)]


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


async def _generate(url: str, n_events: int, batch: int) -> float:
    """Append ``n_events`` of traffic through ``EventStore.append``; the seconds it took."""
    store = EventStore.connect(url)
    timer = Timer()
    try:
        with timer.run():
            for events in _batches(traffic(n_events), batch):
                await store.append(events)
        head = await store.head()
    finally:
        await store.close()
    assert head == n_events, f"the log holds {head} events, expected {n_events}"
    return timer.seconds


async def _replay(url: str, sizes: list[int], page: int) -> list[float]:
    """Replay as ``nrt replay`` does (``nrt.entrypoints.cli.audit.replay_log``); seconds per slice."""
    store = EventStore.connect(url, pool_size=2)
    try:
        await store.head()  # open the pooled connection outside the timed part
        boundaries = list(itertools.accumulate(sizes))
        times: list[float] = []
        state, position, next_boundary = ClusterState(), 0, boundaries[0]
        started = time.perf_counter()
        async for position, event in store.replay(1, None, page=page):
            state = evolve(state, event)
            if position == next_boundary:
                now = time.perf_counter()
                times.append(now - started)
                started = now
                next_boundary = boundaries[len(times)] if len(times) < len(boundaries) else -1
    finally:
        await store.close()
    assert state.events_applied == position == boundaries[-1], f"replayed {state.events_applied} events"
    assert len(times) == len(sizes)
    return times


async def _floor(url: str, sizes: list[int], page: int) -> list[float]:
    """Raw psycopg read of every row's payload in position order; seconds per slice."""
    times: list[float] = []
    async with await psycopg.AsyncConnection.connect(to_libpq(url)) as conn, conn.transaction():
        cursor = conn.cursor(name="replay_floor")
        try:
            await cursor.execute("SELECT body::text FROM events ORDER BY position")
            for size in sizes:
                started, read = time.perf_counter(), 0
                while read < size:
                    rows = await cursor.fetchmany(min(page, size - read))
                    if not rows:
                        raise AssertionError(f"the floor ran out of rows after {sum(sizes[: len(times)]) + read}")
                    read += len(rows)
                times.append(time.perf_counter() - started)
        finally:
            await cursor.close()
    return times


def _best(rounds: list[list[float]]) -> list[float]:
    return [min(column) for column in zip(*rounds, strict=True)]


async def main(n_events: int, slice_size: int, batch: int, page: int, rounds: int) -> None:
    sizes = _slices(n_events, slice_size)
    print(
        f"replay: {n_events:,} events in slices of {slice_size:,}, appended in batches of {batch:,}, "
        f"read in pages of {page:,}, best of {rounds} rounds",
        flush=True,
    )
    with postgres() as server, fresh_database(server) as url:
        append_s = await _generate(url, n_events, batch)
        print(
            f"generated the log through EventStore.append in {append_s:.1f} s "
            f"({n_events / append_s:,.0f} events/s); peak RSS {_peak_rss_mib():,.0f} MiB",
            flush=True,
        )
        floor_rounds: list[list[float]] = []
        replay_rounds: list[list[float]] = []
        for _ in range(rounds):
            floor_rounds.append(await _floor(url, sizes, page))
            replay_rounds.append(await _replay(url, sizes, page))
    floor_times, replay_times = _best(floor_rounds), _best(replay_rounds)

    first_per_event = replay_times[0] / sizes[0]
    print(f"{'slice (positions)':<26} {'replay s':>9} {'events/s':>12} {'vs slice 1':>11} {'vs floor':>9}")
    start = 1
    for size, replay_s, floor_s in zip(sizes, replay_times, floor_times, strict=True):
        label = f"{start:,}-{start + size - 1:,}"
        growth = (replay_s / size) / first_per_event
        print(f"{label:<26} {replay_s:>9.3f} {size / replay_s:>12,.0f} {growth:>11.2f} {replay_s / floor_s:>8.1f}x")
        start += size
    growths = [(t / n) / first_per_event for t, n in zip(replay_times, sizes, strict=True)]
    print(f"slice time / slice 1 time: min {min(growths):.2f}, max {max(growths):.2f} (linear: all near 1.0)")

    # The whole log in one pass, best of the rounds (not the sum of the best slices).
    floor_rate = n_events / min(sum(r) for r in floor_rounds)
    replay_rate = n_events / min(sum(r) for r in replay_rounds)
    report("raw psycopg SELECT body::text (floor)", floor_rate, "events/s")
    report("replay: EventStore.replay + decode + fold", replay_rate, "events/s", replay_rate / floor_rate, "read floor")
    append_rate = n_events / append_s
    report("EventStore.append (log generation)", append_rate, "events/s", append_rate / replay_rate, "replay")
    report("peak RSS of the benchmark process", _peak_rss_mib(), "MiB")


# -- starting from a snapshot, against the log's size ------------------------------------------


async def _grow(store: EventStore, events: Iterator[Event], to: int, batch: int) -> float:
    """Append from ``events`` until the log holds ``to`` events; the seconds it took."""
    timer = Timer()
    with timer.run():
        missing = to - await store.head()
        for chunk in _batches(itertools.islice(events, missing), batch):
            await store.append(chunk)
    assert await store.head() == to
    return timer.seconds


async def _full_replay(store: EventStore, page: int) -> tuple[float, ClusterState]:
    started = time.perf_counter()
    state = ClusterState()
    async for _, event in store.replay(1, None, page=page):
        state = evolve(state, event)
    return time.perf_counter() - started, state


async def _restart(url: str) -> tuple[float, int]:
    """cluster_state's rebuild on restart, from a fresh connection; (seconds, events folded after the snapshot)."""
    started = time.perf_counter()
    store = EventStore.connect(url)
    try:
        controller = Controller(cast(Any, None), cast(Any, None), ControlState())  # the fold only: no bus
        _, folded = await snapshots.rebuild(store, controller, utc_now())
    finally:
        await store.close()
    return time.perf_counter() - started, folded


async def _replay_latest(url: str) -> float:
    started = time.perf_counter()
    store = EventStore.connect(url, pool_size=2)
    try:
        result = await replay_log(store, None)
    finally:
        await store.close()
    assert result.position == result.state.events_applied
    return time.perf_counter() - started


async def snapshot_main(sizes: list[int], lag: int, batch: int, page: int, rounds: int) -> None:
    print(
        f"replay from a snapshot: log sizes {', '.join(f'{n:,}' for n in sizes)}, snapshot {lag:,} events "
        f"behind the head, best of {rounds} rounds",
        flush=True,
    )
    rows: list[tuple[int, float, float, float, int]] = []
    with postgres() as server, fresh_database(server) as url:
        store = EventStore.connect(url)
        events = traffic(sizes[-1])
        try:
            for size in sizes:
                grew = await _grow(store, events, size, batch)
                print(f"grew the log to {size:,} events in {grew:.1f} s", flush=True)
                full_s, _ = await _full_replay(store, page)
                at = max(size - lag, 1)
                position, state_at = await snapshot.fold_log(store, at)  # from the previous size's snapshot
                await snapshot.save(store, position, state_at)
                restart = [await _restart(url) for _ in range(rounds)]
                latest = [await _replay_latest(url) for _ in range(rounds)]
                folded = restart[0][1]
                assert folded == size - at, f"the restart folded {folded} events, expected {size - at}"
                rows.append((size, min(r[0] for r in restart), min(latest), size / full_s, folded))
        finally:
            await store.close()
    first = rows[0]
    print(f"{'log size':>12} {'restart s':>10} {'x smallest':>11} {'replay s':>9} {'x smallest':>11} {'full ev/s':>11}")
    for size, restart_s, latest_s, full_rate, _ in rows:
        print(
            f"{size:>12,} {restart_s:>10.3f} {restart_s / first[1]:>11.2f} {latest_s:>9.3f} "
            f"{latest_s / first[2]:>11.2f} {full_rate:>11,.0f}"
        )
    for size, restart_s, latest_s, full_rate, _ in rows:
        report(
            f"cluster_state restart to ready at {size:,}",
            restart_s,
            "s",
            restart_s / first[1],
            f"{first[0]:,}",
            "<= 1.5",
            3,
        )
        report(f"nrt replay (latest) at {size:,}", latest_s, "s", latest_s / first[2], f"{first[0]:,}", "<= 1.5", 3)
        report(f"full replay at {size:,}", full_rate, "events/s", full_rate / 200_000, "200k/s", ">= 1.0")
    report("peak RSS of the benchmark process", _peak_rss_mib(), "MiB")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--slice", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1_000, help="events per EventStore.append")
    parser.add_argument("--page", type=int, default=10_000, help="rows per read page (nrt replay reads 10,000)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="+", help="log sizes for the snapshot restart benchmark")
    parser.add_argument("--snapshot-lag", type=int, default=5_000, help="events between the snapshot and the head")
    args = parser.parse_args()
    if args.sizes:
        if any(n < 1 for n in args.sizes) or args.snapshot_lag < 0:
            parser.error("--sizes must be positive and --snapshot-lag not negative")
        asyncio.run(snapshot_main(sorted(args.sizes), args.snapshot_lag, args.batch, args.page, args.rounds))
        raise SystemExit(0)
    if args.events < 1 or args.slice < 1 or args.batch < 1 or args.page < 1 or args.rounds < 1:
        parser.error("--events, --slice, --batch, --page and --rounds must be positive")
    asyncio.run(main(args.events, args.slice, args.batch, args.page, args.rounds))
