"""Fencing where the write lands: two stores on one PostgreSQL database, as two cluster_state processes.

The contract (``tests/support/leadership_contract.py``) runs on one store; here the deposed leader and its
successor have their own engines, a takeover waits for the deposed leader's write in flight (the share lock
on the leadership row), and a writer stalled inside its transaction is ended by the server.
"""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import UTC, datetime

import psycopg
import pytest

from nrt.adapters.infra.pgurl import to_libpq
from nrt.adapters.store import EventStore
from nrt.core.eventlog import Decisions, Fenced, RecordedEvent
from nrt.core.events import WorkerJoined

HOLD_S = 0.5  # how long the deposed leader's decider holds its transaction open


def _joined(worker: str) -> WorkerJoined:
    return WorkerJoined(
        occurred_at=datetime(2026, 3, 1, tzinfo=UTC), worker_id=worker, host="h", cpu_count=1, ram_bytes=1
    )


async def test_a_deposed_leaders_append_is_refused_by_postgresql(database_url: str) -> None:
    old, new = EventStore.connect(database_url), EventStore.connect(database_url)
    try:
        lease = await old.claim("old", 0.1)
        assert lease is not None
        refused: list[Fenced] = []
        old.fence(lease.epoch, refused.append)
        await old.append([_joined("w1")])
        await asyncio.sleep(0.3)  # old's lease runs out (a SIGSTOP, a pause): new takes over
        taken = await new.claim("new", 30.0)
        assert taken is not None
        assert taken.epoch == lease.epoch + 1
        new.fence(taken.epoch)
        with pytest.raises(Fenced, match=f"leads epoch {lease.epoch}, but the log is now led at epoch {taken.epoch}"):
            await old.append([_joined("w2")])  # old's cached tail would let it write at once: the fence stops it
        assert len(refused) == 1
        assert [r.position for r in (await new.append([_joined("w3")])).recorded] == [2]
        assert [r.event.worker_id for r in await new.query()] == ["w1", "w3"]  # type: ignore[union-attr]
        assert (await new.verify()).ok
    finally:
        await old.close()
        await new.close()


async def test_a_takeover_waits_for_the_deposed_leaders_write_in_flight(database_url: str) -> None:
    """The claim blocks on the share lock the old leader's transaction holds; the old write commits first,
    and so it is in the log the new leader rebuilds from."""
    old = EventStore.connect(database_url)
    try:
        lease = await old.claim("old", 0.05)
        assert lease is not None
        old.fence(lease.epoch)
        await asyncio.sleep(0.2)  # the lease has run out: a claim may win as soon as no write holds the row
        claimed: list[tuple[int, float]] = []

        def claim() -> None:
            with psycopg.connect(to_libpq(database_url), autocommit=True) as conn:
                started = time.monotonic()
                row = conn.execute(
                    "UPDATE leadership SET epoch = epoch + 1, holder = 'new', lease_until = now() + interval '30 s' "
                    "WHERE id = 1 AND lease_until <= now() RETURNING epoch"
                ).fetchone()
                assert row is not None
                claimed.append((int(row[0]), time.monotonic() - started))

        claimer = threading.Thread(target=claim)

        def decide(recorded: list[RecordedEvent]) -> Decisions:
            if recorded:  # inside the old leader's transaction, after its fence check: a takeover starts now
                claimer.start()
                time.sleep(HOLD_S)
            return Decisions((), 0)

        result = await old.append_decided([_joined("w1")], decide)
        assert len(result.recorded) == 1  # committed under its epoch: the claim had to wait
        await asyncio.to_thread(claimer.join, 10)
        [(epoch, waited)] = claimed
        assert epoch == lease.epoch + 1
        assert waited >= HOLD_S * 0.5, f"the claim did not wait for the write in flight ({waited:.3f}s)"
        with pytest.raises(Fenced):
            await old.append([_joined("w2")])
    finally:
        await old.close()
