"""Decisions are written once: cluster_state appends what it decides with its cause and publishes it afterwards.

A worker's heartbeats make cluster_state decide (``WorkerJoined``, then a ``ModelPlaced`` per
model, besides the bootstrap ``ManifestApplied``). They count at once — folded from the append,
before anything is published — and the process is killed between the append and the publish:
the outbox relay stops dead either before it sends (nothing of the decisions reached the stream)
or after the stream stored them but before the outbox rows were cleared. A new cluster_state on
the same database and stream publishes what was left: every decision is in the log once and in
the stream once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Callable

import msgspec
import psycopg
import pytest
from nats.aio.client import Client

from cluster_helpers import beat, manifest_text
from cluster_state.outbox_relay import OutboxRelay
from nrt.adapters.bus import subjects
from nrt.adapters.infra.pgurl import to_libpq
from nrt.adapters.store import EventStore
from state_services import StartService


async def _heartbeats(nc: Client, worker_id: str) -> None:
    while True:
        await nc.publish(subjects.WORKER_HEARTBEAT, msgspec.json.encode(beat(worker_id)))
        await asyncio.sleep(0.2)


def _sql(database_url: str, query: str) -> list[tuple[object, ...]]:
    with psycopg.connect(to_libpq(database_url)) as conn:
        return conn.execute(query).fetchall()


def _outbox(database_url: str) -> dict[str, str]:
    """Event id -> type of the decisions recorded and not yet published."""
    rows = _sql(database_url, "SELECT e.event_id::text, e.type FROM decision_outbox JOIN events e USING (position)")
    return {str(i): str(t) for i, t in rows}


async def _in_stream(nc: Client) -> Counter[str]:
    """How many times each message id cluster_state published is in the event stream."""
    js = nc.jetstream()
    info = await js.stream_info(subjects.EVENTS_STREAM)
    counts: Counter[str] = Counter()
    if info.state.messages == 0:
        return counts
    for sequence in range(info.state.first_seq, info.state.last_seq + 1):
        msg = await js.get_msg(subjects.EVENTS_STREAM, sequence)
        if msg.subject is not None and msg.subject.startswith("nrt.events.cluster_state."):
            counts[(msg.headers or {})["Nats-Msg-Id"]] += 1
    return counts


async def _until(predicate: Callable[[], bool], within: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("killed", ["before_publish", "after_publish"])
async def test_killed_between_the_append_and_the_publish_loses_and_duplicates_nothing(
    killed: str,
    nc: Client,
    database_url: str,
    event_store: EventStore,
    start_cluster_state: StartService,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    died = asyncio.Event()

    async def dead_here(*args: object, **kwargs: object) -> None:
        died.set()
        await asyncio.Event().wait()  # the process is gone: nothing after this point ever runs

    if killed == "before_publish":
        monkeypatch.setattr(OutboxRelay, "_send", dead_here)
    else:
        monkeypatch.setattr(EventStore, "mark_published", dead_here)
    first = await start_cluster_state(manifest_text=manifest_text(), tick_s=0.1)
    beats = asyncio.create_task(_heartbeats(nc, "w1"))
    try:
        # the decisions count at once: folded from the append, whatever the stream holds
        placed = await first.controller.wait_for(
            lambda s: "w1" in s.workers and any("w1" in m.placements for m in s.models.values()), within=20
        )
        await asyncio.wait_for(died.wait(), 10)
        pending = _outbox(database_url)
        assert {"ManifestApplied", "WorkerJoined", "ModelPlaced"} <= set(pending.values())
        streamed = await _in_stream(nc)
        if killed == "before_publish":
            assert not set(pending) & set(streamed)  # recorded, none published
        else:
            assert set(streamed) <= set(pending)  # the stream has the first page, its rows were not cleared
            assert streamed
        await first.stop()  # the relay stays dead where it was killed: it sends and clears nothing more
        monkeypatch.undo()

        second = await start_cluster_state(tick_s=0.1)
        await _until(lambda: not _outbox(database_url))
        assert second.relay.published >= len(pending)
    finally:
        beats.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beats
    decided = {
        str(i): str(t)
        for i, t in _sql(
            database_url,
            "SELECT event_id::text, type FROM events WHERE type IN ('ManifestApplied', 'WorkerJoined', 'ModelPlaced')",
        )
    }
    assert set(pending) <= set(decided)
    streamed = await _in_stream(nc)
    assert {i: streamed[i] for i in decided} == dict.fromkeys(decided, 1)  # each decision published once
    assert sorted(Counter(decided.values()).items()) == [
        ("ManifestApplied", 1),
        ("ModelPlaced", sum(1 for m in placed.models.values() if "w1" in m.placements)),
        ("WorkerJoined", 1),
    ]  # decided once: the redelivery and the restart decided nothing again
    assert (await event_store.verify()).ok
