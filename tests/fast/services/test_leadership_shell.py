"""cluster_state's leadership shell on the in-memory store: a standby waits for the lease, the leader pauses
when it cannot renew, and a deposed leader learns it from a renewal or from a refused write."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from cluster_state.leadership import Leadership
from nrt.adapters.store import InMemoryEventStore
from nrt.core.eventlog import Fenced, Lease, LeaseTerms
from nrt.core.events import WorkerJoined

TERMS = LeaseTerms(lease_s=3.0, renew_s=1.0)
QUICK = LeaseTerms(lease_s=0.4, renew_s=0.1)  # where the test waits for real renewals


class Clocks:
    """The store's wall clock and the instances' monotonic clock, moved together by the test."""

    def __init__(self) -> None:
        self.wall = datetime(2026, 11, 27, tzinfo=UTC)
        self.mono = 1000.0

    def advance(self, seconds: float) -> None:
        self.wall += timedelta(seconds=seconds)
        self.mono += seconds


def _joined() -> WorkerJoined:
    return WorkerJoined(worker_id="w1", host="h", cpu_count=1, ram_bytes=1)


class Unanswering(InMemoryEventStore):
    """A store that stops answering renewals (a database that is down), and can answer again."""

    down = False

    async def renew(self, lease: Lease, lease_s: float) -> Lease | None:
        if self.down:
            raise OSError("connection refused")
        return await super().renew(lease, lease_s)


async def test_a_standby_waits_for_the_lease_and_the_deposed_leader_steps_down() -> None:
    clocks = Clocks()
    store = InMemoryEventStore(clock=lambda: clocks.wall)
    leader = Leadership(store, TERMS, "a", clock=lambda: clocks.mono)
    assert leader.epoch() == 0  # a standby until it leads
    tenure = await leader.acquire()
    assert (tenure.epoch, leader.leads(), leader.epoch()) == (1, True, 1)

    standby = Leadership(store, TERMS, "b", clock=lambda: clocks.mono)
    waiting = asyncio.ensure_future(standby.acquire())
    await asyncio.sleep(TERMS.campaign_s * 2)  # it tries, and waits: a's lease runs
    assert not waiting.done()
    clocks.advance(TERMS.lease_s)  # a died: nobody renewed
    assert not leader.leads()  # a's own view: the lease ran out, do not act
    won = await asyncio.wait_for(waiting, TERMS.campaign_s * 4)
    assert won.epoch == 2
    assert standby.leads()

    stopping = asyncio.Event()
    keeping = asyncio.ensure_future(leader.keep(stopping))
    await asyncio.wait_for(leader.deposed.wait(), 2)  # a's next renewal finds epoch 2
    await keeping
    assert "taken over" in leader.why
    assert not leader.leads()
    assert (leader.epoch(), standby.epoch()) == (0, 2)
    await leader.release()  # a deposed leader releases nothing: b's lease stands
    assert await store.leader() == standby.lease


async def test_a_refused_write_deposes_at_once() -> None:
    clocks = Clocks()
    store = InMemoryEventStore(clock=lambda: clocks.wall)
    leader = Leadership(store, TERMS, "a", clock=lambda: clocks.mono)
    await leader.acquire()
    clocks.advance(TERMS.lease_s)
    assert await store.claim("b", TERMS.lease_s) is not None  # b took over while a was paused
    with pytest.raises(Fenced):
        await store.append([_joined()])  # a's write, still fenced at epoch 1
    assert leader.deposed.is_set()
    assert "led at epoch 2" in leader.why
    assert await store.head() == 0


async def test_a_leader_that_cannot_renew_pauses_and_acts_again_when_nobody_took_over() -> None:
    clocks = Clocks()
    store = Unanswering(clock=lambda: clocks.wall)
    leader = Leadership(store, QUICK, "a", clock=lambda: clocks.mono)
    await leader.acquire()
    stopping = asyncio.Event()
    store.down = True
    keeping = asyncio.ensure_future(leader.keep(stopping))
    await asyncio.sleep(0)
    clocks.advance(QUICK.lease_s + 0.1)
    assert not leader.leads()  # paused: the lease would have run out
    assert not leader.deposed.is_set()
    store.down = False
    for _ in range(40):  # the next renewals (every renew_s of real time) find the epoch still ours
        await asyncio.sleep(QUICK.renew_s / 2)
        if leader.leads():
            break
    assert leader.leads()
    stopping.set()
    await keeping
    await leader.release()
    assert await store.claim("b", QUICK.lease_s) is not None  # released: a standby takes over at once
