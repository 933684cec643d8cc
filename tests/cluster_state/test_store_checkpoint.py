"""EventStore.append(checkpoint=...): a consumer's position is committed with the events it recorded."""

from __future__ import annotations

import pytest

from nrt.store import Checkpoint, EventStore
from nrt.testing.traffic import traffic


async def test_the_checkpoint_commits_with_the_events(event_store: EventStore) -> None:
    events = list(traffic(30, seed=11))
    assert await event_store.checkpoint("c") == 0
    await event_store.append(events[:10], checkpoint=Checkpoint(consumer="c", sequence=10))
    assert await event_store.checkpoint("c") == 10
    # a redelivered batch: nothing new is stored, the checkpoint still moves (both append paths)
    result = await event_store.append(events[:10], checkpoint=Checkpoint(consumer="c", sequence=12))
    assert (len(result.recorded), result.duplicates) == (0, 10)
    assert await event_store.checkpoint("c") == 12
    fresh_store = EventStore(event_store.engine)  # no cached tail: the checked path
    result = await fresh_store.append(events[5:20], checkpoint=Checkpoint(consumer="c", sequence=20))
    assert (len(result.recorded), result.duplicates) == (10, 5)
    assert await event_store.checkpoint("c") == 20
    assert await event_store.checkpoint("other") == 0
    await event_store.save_checkpoint(Checkpoint(consumer="other", sequence=3))
    assert await event_store.checkpoint("other") == 3


async def test_a_failed_append_leaves_the_checkpoint_where_it_was(event_store: EventStore) -> None:
    events = list(traffic(10, seed=12))
    await event_store.append(events[:5], checkpoint=Checkpoint(consumer="c", sequence=5))
    from nrt.store import ConcurrencyError

    with pytest.raises(ConcurrencyError):
        await event_store.append(
            events[5:], expected_versions={events[5].stream_id: 99}, checkpoint=Checkpoint(consumer="c", sequence=10)
        )
    assert await event_store.checkpoint("c") == 5
    assert await event_store.head() == 5
