"""The compare-and-set store's contract (``nrt.adapters.bus.kv.CasStore``), run against every store.

The tests run from the files that import them with a ``cas`` fixture:
``tests/fast/services/test_shared_rate_limits.py`` (``nrt.testing.memory_kv.MemoryCas``) and
``tests/integration/gateway/test_rate_limits_across_gateways.py`` (a JetStream KV bucket on a real NATS server).
"""

from __future__ import annotations

import asyncio

import pytest

from nrt.adapters.bus.kv import CasStore, StaleRevision


async def test_a_key_never_written_reads_none(cas: CasStore) -> None:
    assert await cas.read("k0") is None


async def test_create_writes_once_then_refuses(cas: CasStore) -> None:
    revision = await cas.write("k1", b"one", None)
    read = await cas.read("k1")
    assert read is not None
    assert (read.value, read.revision) == (b"one", revision)
    with pytest.raises(StaleRevision):
        await cas.write("k1", b"two", None)
    again = await cas.read("k1")
    assert again is not None
    assert again.value == b"one"


async def test_an_update_needs_the_revision_it_read(cas: CasStore) -> None:
    first = await cas.write("k2", b"a", None)
    second = await cas.write("k2", b"b", first)
    assert second > first
    with pytest.raises(StaleRevision):
        await cas.write("k2", b"stale", first)  # another writer got there first
    read = await cas.read("k2")
    assert read is not None
    assert (read.value, read.revision) == (b"b", second)


async def test_revisions_change_per_write_and_keys_are_separate(cas: CasStore) -> None:
    a = await cas.write("k3", b"x", None)
    b = await cas.write("k4", b"y", None)
    assert a != b
    with pytest.raises(StaleRevision):
        await cas.write("k3", b"z", b)  # k4's revision is not k3's


async def test_of_concurrent_writers_at_one_revision_exactly_one_wins(cas: CasStore) -> None:
    base = await cas.write("k5", b"0", None)
    results = await asyncio.gather(*(cas.write("k5", f"{i}".encode(), base) for i in range(8)), return_exceptions=True)
    wins = [r for r in results if isinstance(r, int)]
    assert len(wins) == 1
    assert all(isinstance(r, StaleRevision) for r in results if not isinstance(r, int))
