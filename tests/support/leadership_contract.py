"""The leadership contract (``nrt.core.eventlog.leadership``), run against every store: one leader at a time,
a lease that only a renewal at the current epoch extends, and a fence that refuses every write of a
deposed epoch, storing nothing.

Imported by ``tests/fast/adapters/test_memory_store_contract.py`` and
``tests/integration/store/test_postgres_store_contract.py`` (each gives a ``backend`` fixture).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Protocol, cast

import pytest

from nrt.core.eventlog import Checkpoint, DecisionLog, Decisions, Fenced, LeaseStore, RecordedEvent
from nrt.core.events import WorkerJoined
from store_backends import Backend

SHORT_S = 0.05  # a lease that has run out by the time the test sleeps past it


class LedLog(DecisionLog, LeaseStore, Protocol):
    """A store with its leadership record."""


def _led(backend: Backend) -> LedLog:
    return cast(LedLog, backend.log)


def _joined(worker: str) -> WorkerJoined:
    return WorkerJoined(
        occurred_at=datetime(2026, 3, 1, tzinfo=UTC), worker_id=worker, host="h", cpu_count=1, ram_bytes=1
    )


def _nothing(_: list[RecordedEvent]) -> Decisions:
    return Decisions((), 0)


async def test_one_leader_at_a_time_and_a_claim_after_the_lease_bumps_the_epoch(backend: Backend) -> None:
    store = _led(backend)
    assert await store.leader() is None
    first = await store.claim("a", 30.0)
    assert first is not None
    assert (first.epoch, first.holder) == (1, "a")
    assert await store.claim("b", 30.0) is None  # a's lease runs
    assert await store.leader() == first
    short = await store.renew(first, SHORT_S)
    assert short is not None
    assert short.epoch == 1
    await asyncio.sleep(SHORT_S * 3)
    second = await store.claim("b", 30.0)
    assert second is not None
    assert (second.epoch, second.holder) == (2, "b")
    assert await store.claim("c", 30.0) is None
    assert await store.renew(first, 30.0) is None  # a was deposed: its epoch is gone
    renewed = await store.renew(second, 30.0)
    assert renewed is not None
    assert renewed.epoch == 2
    assert renewed.until >= second.until


async def test_a_released_lease_is_claimed_at_once_and_a_stale_release_changes_nothing(backend: Backend) -> None:
    store = _led(backend)
    first = await store.claim("a", 30.0)
    assert first is not None
    await store.release(first)
    second = await store.claim("b", 30.0)
    assert second is not None
    assert second.epoch == 2
    await store.release(first)  # a's epoch is gone: b's lease stands
    assert await store.claim("c", 30.0) is None
    assert await store.leader() == second


async def test_a_renewal_past_the_lease_keeps_the_epoch_when_nobody_took_over(backend: Backend) -> None:
    store = _led(backend)
    lease = await store.claim("a", SHORT_S)
    assert lease is not None
    await asyncio.sleep(SHORT_S * 3)
    renewed = await store.renew(lease, 30.0)  # late, but no other epoch: nobody else wrote
    assert renewed is not None
    assert renewed.epoch == lease.epoch
    assert await store.claim("b", 30.0) is None


async def test_a_deposed_epochs_writes_are_refused_and_store_nothing(backend: Backend) -> None:
    store = _led(backend)
    old = await store.claim("old", SHORT_S)
    assert old is not None
    refusals: list[Fenced] = []
    store.fence(old.epoch, refusals.append)
    await store.append([_joined("w1")], checkpoint=Checkpoint(consumer="c", sequence=1))  # leading: accepted
    await asyncio.sleep(SHORT_S * 3)
    new = await store.claim("new", 30.0)
    assert new is not None
    assert new.epoch == old.epoch + 1
    head = await store.head()

    writes = {
        "append": lambda: store.append([_joined("w2")]),
        "append_decided": lambda: store.append_decided([_joined("w3")], _nothing),
        "save_checkpoint": lambda: store.save_checkpoint(Checkpoint(consumer="c", sequence=9)),
        "save_snapshot": lambda: store.save_snapshot(head, 1, b"state"),
        "mark_published": lambda: store.mark_published([head]),
    }
    for name, write in writes.items():
        with pytest.raises(Fenced) as refused:
            await write()
        assert (refused.value.epoch, refused.value.current) == (old.epoch, new.epoch), name
        assert "refused" in str(refused.value)
    assert len(refusals) == len(writes)
    assert await store.head() == head
    assert await store.checkpoint("c") == 1
    assert await store.snapshots() == []
    assert (await store.verify()).ok

    store.fence(new.epoch)  # the new leader's writes go through
    result = await store.append([_joined("w2")])
    assert [r.position for r in result.recorded] == [head + 1]


async def test_an_unfenced_store_writes_whoever_leads(backend: Backend) -> None:
    store = _led(backend)
    assert await store.claim("someone", 30.0) is not None
    result = await store.append([_joined("w1")])  # tools and tests that never lead are not fenced
    assert len(result.recorded) == 1
