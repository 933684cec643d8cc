"""What only the in-memory store has: its clock, its refusal of ids that are not UUIDs, its tamper hook."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from nrt.adapters.store import InMemoryEventStore
from nrt.core.events import WorkerLost

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def _lost(worker: str, event_id: str | None = None) -> WorkerLost:
    if event_id is None:
        return WorkerLost(occurred_at=T0, worker_id=worker, reason="shutdown")
    return WorkerLost(event_id=event_id, occurred_at=T0, worker_id=worker, reason="shutdown")


async def test_recorded_at_comes_from_the_clock_once_per_append() -> None:
    ticks = iter([datetime(2026, 4, 1, tzinfo=UTC), datetime(2026, 4, 2, tzinfo=UTC)])
    log = InMemoryEventStore(clock=lambda: next(ticks))
    first = await log.append([_lost("w1"), _lost("w2")])
    await log.append([_lost("w3")])
    assert {r.recorded_at for r in first.recorded} == {datetime(2026, 4, 1, tzinfo=UTC)}
    assert [r.recorded_at async for r in log.read_positions()] == [
        datetime(2026, 4, 1, tzinfo=UTC),
        datetime(2026, 4, 1, tzinfo=UTC),
        datetime(2026, 4, 2, tzinfo=UTC),
    ]


async def test_an_id_that_is_not_a_uuid_is_refused_and_nothing_is_stored() -> None:
    log = InMemoryEventStore()
    with pytest.raises(ValueError, match="WorkerLost has event id 'lost-1', which is not a UUID"):
        await log.append([_lost("w1"), _lost("w2", event_id="lost-1")])
    assert await log.head() == 0


async def test_ids_are_compared_as_uuids_like_postgresql_does() -> None:
    log = InMemoryEventStore()
    event_id = "0F8FAD5B-D9CB-469F-A165-70867728950E"
    await log.append([_lost("w1", event_id=event_id)])
    again = await log.append([_lost("w1", event_id=event_id.lower())])
    assert (again.recorded, again.duplicates) == ([], 1)


async def test_tampering_with_a_row_that_is_not_there_says_so() -> None:
    log = InMemoryEventStore()
    await log.append([_lost("w1")])
    with pytest.raises(KeyError, match="no row at position 2"):
        log.tamper_with_row(2, lambda _: None)
