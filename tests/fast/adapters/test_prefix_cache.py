"""The shared-prefix cache's bookkeeping: matching, what is worth storing, candidates (ids only), LRU within
the bytes, changes."""

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
    # nothing (or too little) shared with an entry: nothing (the candidates decide)
    assert PrefixCache.worth_storing(TEMPLATE, 20) == 0
    assert PrefixCache.worth_storing(TEMPLATE[: MIN_PREFIX_TOKENS - 1], 40) == 0


def after_prefill(cache: PrefixCache[str], prompt: tuple[int, ...]) -> int:
    """What the scheduler does for a prompt: match at prefill start, then store what is worth it (its KV
    copied only then); how many leading ids it reused."""
    found = cache.match("m", prompt)
    length = cache.worth_storing(prompt, found.length if found is not None else 0)
    if length <= 0:
        length = cache.note_candidate("m", prompt)
    if length > 0:
        cache.store("m", prompt[:length], kv_of)
    return found.length if found is not None else 0


def test_a_single_prompt_stores_nothing() -> None:
    cache: PrefixCache[str] = PrefixCache(1_000_000)
    assert after_prefill(cache, (*TEMPLATE, 1, 2)) == 0
    assert (cache.total_bytes, cache.usage(), cache.drain()) == (0, [], [])  # no copy of its KV, no event
    assert cache.candidates("m") == 1  # its ids only
    assert cache.match("m", (*TEMPLATE, 3)) is None  # a candidate is never matched at prefill start


def test_the_second_prompt_sharing_a_prefix_stores_it_and_the_third_reuses_it() -> None:
    cache: PrefixCache[str] = PrefixCache(1_000_000)
    first, second, third = ((*TEMPLATE, q, q + 1, q + 2) for q in (1, 5, 9))
    assert after_prefill(cache, first) == 0
    assert cache.drain() == []
    assert after_prefill(cache, second) == 0  # it computed the template too: it proves it shared
    shared = TEMPLATE[: block_floor(len(TEMPLATE))]
    assert cache.drain() == [PrefixKvChange("stored", "m", prefix_key(shared), 288, 2880)]
    assert after_prefill(cache, third) == 288  # reused from the third on
    assert cache.drain() == []  # held already
    assert [u.tokens for u in cache.usage()] == [288]


def test_a_shared_part_shorter_than_the_minimum_stores_nothing() -> None:
    cache: PrefixCache[str] = PrefixCache(1_000_000)
    head = TEMPLATE[: MIN_PREFIX_TOKENS - 1]
    assert cache.note_candidate("m", (*head, *range(5000, 5100))) == 0
    assert cache.note_candidate("m", (*head, *range(6000, 6100))) == 0
    # a prompt shorter than the minimum is not even noted
    assert cache.note_candidate("m", head) == 0
    assert cache.candidates("m") == 2
    # shared with the longest candidate, cut to a block
    assert cache.note_candidate("m", (*head, *range(5000, 5020), 1)) == block_floor(len(head) + 20) == 48


def test_candidates_are_per_owner_and_bounded_least_recently_used_first() -> None:
    cache: PrefixCache[str] = PrefixCache(1_000_000, max_candidates=3)
    prompts = [tuple(range(s, s + 40)) for s in range(0, 5000, 1000)]  # five prompts, no two alike
    for p in prompts[:3]:
        assert cache.note_candidate("m", p) == 0
    assert cache.note_candidate("n", prompts[3]) == 0  # another owner's prompt: it is not compared with m's
    assert cache.note_candidate("m", prompts[0]) == 32  # shares its block-aligned ids with itself; marked used
    assert cache.note_candidate("m", prompts[4]) == 0  # the least recently used (prompts[1]) goes
    assert (cache.candidates("m"), cache.candidates("n")) == (3, 1)
    assert cache.note_candidate("m", prompts[1]) == 0  # forgotten: compared with nothing, noted again
    assert cache.note_candidate("m", prompts[0]) == 32
    for i in range(1000):  # many distinct prompts: the index stays within its bound
        cache.note_candidate("m", tuple(range(10_000 + i * 50, 10_000 + i * 50 + 48)))
    assert cache.candidates("m") == 3
    assert cache.drain() == []  # candidates make no events
    assert cache.total_bytes == 0  # and hold no bytes


def test_nothing_is_noted_where_nothing_can_be_held() -> None:
    cache: PrefixCache[str] = PrefixCache(0)
    assert cache.note_candidate("m", TEMPLATE) == 0
    assert cache.note_candidate("m", TEMPLATE) == 0
    assert cache.candidates("m") == 0


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
    cache.note_candidate("n", TEMPLATE)
    dropped = cache.clear()
    assert [(d.owner, d.tokens) for d in dropped] == [("n", 48)]
    assert cache.total_bytes == 0
    assert cache.match("n", TEMPLATE) is None
    assert cache.candidates("n") == 0
