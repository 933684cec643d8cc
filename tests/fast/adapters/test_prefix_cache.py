"""The shared-prefix cache's bookkeeping: matching, what is worth storing, LRU within the bytes, changes."""

from __future__ import annotations

from nrt.adapters.inference.prefixes import (
    BLOCK_TOKENS,
    MIN_PREFIX_TOKENS,
    PrefixCache,
    PrefixKvChange,
    block_floor,
    prefix_key,
)

TEMPLATE = tuple(range(100, 100 + 300))  # a 300-token template


def kv_of(n: int) -> tuple[str, int]:
    return f"kv[{n}]", n * 10  # 10 bytes a token


def test_keys_are_hashes_of_the_ids() -> None:
    assert prefix_key([1, 2, 3]) == prefix_key((1, 2, 3))
    assert prefix_key([1, 2, 3]) != prefix_key([1, 2, 4])
    assert len(prefix_key(TEMPLATE)) == 16


def test_a_prompt_matches_the_longest_shared_prefix_of_its_owner_only() -> None:
    cache: PrefixCache[str] = PrefixCache(1_000_000)
    assert cache.store("m", (*TEMPLATE, 1, 2), kv_of)
    assert cache.store("m", TEMPLATE[:64], kv_of)
    found = cache.match("m", (*TEMPLATE, 1, 3, 4))
    assert found is not None
    assert (found.length, found.entry.tokens) == (301, (*TEMPLATE, 1, 2))
    assert cache.match("other", TEMPLATE) is None  # another model's prompts never see these
    assert cache.match("m", (7, *TEMPLATE)) is None  # no entry starts with its first block
    assert cache.match("m", TEMPLATE[: BLOCK_TOKENS - 1]) is None  # shorter than a block


def test_what_is_worth_storing() -> None:
    # shared with an entry: that part, cut to a block boundary
    assert PrefixCache.worth_storing((*TEMPLATE, 5), 301) == block_floor(301) == 288
    # nothing (or too little) shared: the prompt's own beginning, as a candidate, or nothing
    assert PrefixCache.worth_storing(TEMPLATE, 20) == 288
    assert PrefixCache.worth_storing(TEMPLATE, 20, candidate=False) == 0
    assert PrefixCache.worth_storing(TEMPLATE[: MIN_PREFIX_TOKENS - 1], 0) == 0


def test_store_holds_once_and_records_the_change() -> None:
    cache: PrefixCache[str] = PrefixCache(1_000_000)
    assert cache.store("m", TEMPLATE[:32], kv_of)
    assert not cache.store("m", TEMPLATE[:32], kv_of)  # held already
    assert cache.total_bytes == cache.bytes_held("m") == 320
    assert cache.drain() == [PrefixKvChange("stored", "m", prefix_key(TEMPLATE[:32]), 32, 320)]
    assert cache.drain() == []


def test_least_recently_used_entries_go_beyond_the_capacity() -> None:
    cache: PrefixCache[str] = PrefixCache(1000)  # room for two entries of 48 tokens (480 bytes)
    a, b, c = (tuple(range(s, s + 48)) for s in (0, 1000, 2000))
    cache.store("m", a, kv_of)
    cache.store("m", b, kv_of)
    assert cache.match("m", (*a, 9)) is not None  # a is used: b is now the least recently used
    cache.store("m", c, kv_of)
    assert [u.tokens for u in cache.usage()] == [48, 48]
    assert cache.match("m", b) is None
    assert cache.match("m", c) is not None
    assert cache.total_bytes == 960
    evicted = [ch for ch in cache.drain() if ch.action == "evicted"]
    assert evicted == [PrefixKvChange("evicted", "m", prefix_key(b), 48, 480)]


def test_an_entry_larger_than_the_capacity_is_not_held() -> None:
    cache: PrefixCache[str] = PrefixCache(100)
    assert not cache.store("m", TEMPLATE, kv_of)
    assert cache.total_bytes == 0
    assert cache.drain() == []


def test_evict_and_clear() -> None:
    cache: PrefixCache[str] = PrefixCache(1_000_000)
    cache.store("m", TEMPLATE[:32], kv_of)
    cache.store("n", TEMPLATE[:48], kv_of)
    assert cache.evict("m", prefix_key(TEMPLATE[:32])) == 320
    assert cache.evict("m", prefix_key(TEMPLATE[:32])) == 0
    dropped = cache.clear()
    assert [(d.owner, d.tokens) for d in dropped] == [("n", 48)]
    assert cache.total_bytes == 0
    assert cache.match("n", TEMPLATE) is None
