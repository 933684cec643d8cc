"""Shared-prefix KV: the cache of a prompt prefix that many requests start with, kept per model.

A specialist's template or a long system prompt starts every conversation of that specialist:
its KV is computed once and every later prompt that starts with the same token ids starts its
prefill from a copy of it (what vLLM calls automatic prefix caching).

Matching is token-level: a new prompt reuses the longest common prefix it shares with any held
entry of its owner (a causal cache truncates cleanly, so any length of an entry's columns is
exactly the KV a full prefill of those tokens gives). Only entries that begin with the prompt's
first block of ``BLOCK_TOKENS`` ids are compared (an index keyed by the hash of that block).

Entries are found without any hint from the template: after a prompt is prefilled,

* when it shared at least ``MIN_PREFIX_TOKENS`` with an entry, the shared part (cut down to a
  block boundary) is what many requests start with: it is stored as its own entry unless held;
* else it is compared with the *candidates*, the token ids of its owner's recent prompts (cut down
  to a block boundary; no KV, no bytes, no events: at most ``max_candidates`` per owner, least
  recently used out, found by their first block like the entries): when it shares at least
  ``MIN_PREFIX_TOKENS`` with one, that shared part (cut down to a block boundary) is stored, its KV
  copied from the prompt's own, just computed; the prompt is then noted as a candidate itself
  (not for a prompt that continued its session's cache: what it shares with its own earlier turns
  is its conversation's, not a shared prefix; the scheduler skips this step for it).

So a prompt nobody shares costs no copy of its KV, no bytes and no event: the second prompt that
starts alike proves the prefix shared and stores it, and the third onwards reuses it.

Cutting at a block boundary keeps the few ids that two user messages happen to share after the
template (a "The", a space) out of the shared entries, so one template gives one entry.

Entries are keyed by a hash of their token ids, held least recently used first, and their bytes
are bounded by ``capacity_bytes`` (per model and worker): a store beyond it evicts the least
recently used entries. Prefix entries are evicted on their own, never a session for a prefix: a
session's cache is its conversation's alone and rebuilding it costs its whole transcript, while
a prefix entry is rebuilt by the next request that starts with it.

Pure bookkeeping over opaque caches (``T``: the engine's tensors): thread-safe, since the
scheduler thread stores and matches while the event loop drains the changes to record them.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

import numpy as np
import numpy.typing as npt

T = TypeVar("T")

BLOCK_TOKENS = 16  # entries end on a multiple of this many tokens
MIN_PREFIX_TOKENS = 32  # a shorter shared beginning is not worth an entry
DEFAULT_MAX_CANDIDATES = 256  # recent prompts' ids kept per owner to find shared beginnings (8 bytes an id)

PrefixKvAction = Literal["stored", "evicted"]
Ids = npt.NDArray[np.int64]


def prefix_key(tokens: Sequence[int] | Ids) -> str:
    """The key of a prefix: a hash of its token ids (16 hex digits)."""
    return hashlib.blake2b(np.asarray(tokens, dtype=np.int64).tobytes(), digest_size=8).hexdigest()


def block_floor(length: int) -> int:
    return length - length % BLOCK_TOKENS


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading ids ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _common_ids(a: Ids, b: Ids) -> int:
    """:func:`common_prefix` of two id arrays, compared at once."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if differ.size else n


@dataclass(frozen=True, slots=True, eq=False)
class PrefixEntry(Generic[T]):
    """One held prefix: its owner (a model id), its token ids, its cache and the bytes that holds."""

    owner: str
    key: str
    tokens: tuple[int, ...]
    kv: T
    nbytes: int


@dataclass(frozen=True, slots=True)
class PrefixKvChange:
    """An entry stored or evicted, to be recorded (``PrefixKvStored`` / ``PrefixKvEvicted``)."""

    action: PrefixKvAction
    owner: str
    key: str
    tokens: int
    nbytes: int


@dataclass(frozen=True, slots=True)
class PrefixMatch(Generic[T]):
    """The entry a prompt shares the most leading ids with, and how many."""

    entry: PrefixEntry[T]
    length: int


@dataclass(frozen=True, slots=True)
class PrefixUsage:
    owner: str
    key: str
    tokens: int
    nbytes: int
    last_used: float  # time.time() of its last store or match


class PrefixCache(Generic[T]):
    """(owner, key) -> a prefix's cache, least recently used first, within ``capacity_bytes``; and per
    owner, the ids of at most ``max_candidates`` recent prompts (no cache) to find what they share."""

    def __init__(self, capacity_bytes: int, max_candidates: int = DEFAULT_MAX_CANDIDATES) -> None:
        self.capacity_bytes = capacity_bytes
        self.max_candidates = max_candidates
        self._entries: OrderedDict[tuple[str, str], PrefixEntry[T]] = OrderedDict()
        self._last_used: dict[tuple[str, str], float] = {}
        self._by_block: dict[tuple[str, tuple[int, ...]], set[str]] = {}  # (owner, first block) -> keys
        self._changes: list[PrefixKvChange] = []
        self._bytes = 0
        self._candidates: dict[str, OrderedDict[str, Ids]] = {}  # owner -> key -> ids, LRU first
        self._candidate_blocks: dict[tuple[str, tuple[int, ...]], set[str]] = {}  # (owner, first block) -> keys
        self._lock = threading.Lock()

    # -- matching ----------------------------------------------------------------------

    def match(self, owner: str, prompt: Sequence[int]) -> PrefixMatch[T] | None:
        """The held entry of ``owner`` sharing the most leading ids with ``prompt`` (the most recently
        used among equals), marked used; None when none shares a first block."""
        if len(prompt) < BLOCK_TOKENS:
            return None
        with self._lock:
            keys = self._by_block.get((owner, tuple(prompt[:BLOCK_TOKENS])), set())
            best: PrefixMatch[T] | None = None
            for key in keys:
                entry = self._entries[(owner, key)]
                length = common_prefix(entry.tokens, prompt)
                if best is None or length > best.length:
                    best = PrefixMatch(entry, length)
            if best is not None:
                self._touch((owner, best.entry.key))
            return best

    @staticmethod
    def worth_storing(prompt: Sequence[int], matched: int) -> int:
        """How many leading ids of a prefilled ``prompt`` that shared ``matched`` with a held entry to store
        (0: none): that shared part cut to a block boundary, when it is long enough."""
        shared = block_floor(min(matched, len(prompt)))
        return shared if shared >= MIN_PREFIX_TOKENS else 0

    def note_candidate(self, owner: str, prompt: Sequence[int]) -> int:
        """Compare a prefilled ``prompt`` with the candidates of ``owner``, then note it as one (its
        block-aligned ids, no cache). How many leading ids to store (0: none): the block-aligned part it
        shares with the candidate it shares the most with, when that is long enough (that candidate is
        marked used). Nothing is noted where nothing can be held (``capacity_bytes`` 0)."""
        length = block_floor(len(prompt))
        if length < MIN_PREFIX_TOKENS or self.capacity_bytes <= 0:
            return 0
        ids = np.asarray(prompt[:length], dtype=np.int64)
        block = (owner, tuple(int(t) for t in ids[:BLOCK_TOKENS]))
        key = prefix_key(ids)
        with self._lock:
            noted = self._candidates.setdefault(owner, OrderedDict())
            best, best_key = 0, None
            for other in self._candidate_blocks.get(block, ()):
                shared = _common_ids(noted[other], ids)
                if shared > best:
                    best, best_key = shared, other
            if best_key is not None:
                noted.move_to_end(best_key)
            if key in noted:
                noted.move_to_end(key)
            else:
                noted[key] = ids
                self._candidate_blocks.setdefault(block, set()).add(key)
                while len(noted) > self.max_candidates:
                    self._forget(owner, *noted.popitem(last=False))
            if not noted:
                del self._candidates[owner]
        shared = block_floor(best)
        return shared if shared >= MIN_PREFIX_TOKENS else 0

    def candidates(self, owner: str) -> int:
        """How many candidates ``owner`` has noted."""
        with self._lock:
            return len(self._candidates.get(owner, ()))

    def holds(self, owner: str, tokens: Sequence[int]) -> bool:
        """Whether exactly these ids are held (marking the entry used)."""
        entry_id = (owner, prefix_key(tokens))
        with self._lock:
            if entry_id not in self._entries:
                return False
            self._touch(entry_id)
            return True

    # -- storing and evicting ----------------------------------------------------------

    def store(self, owner: str, tokens: Sequence[int], kv_of: Callable[[int], tuple[T, int]]) -> bool:
        """Hold the cache of ``tokens`` for ``owner`` unless held already; ``kv_of(length)`` gives the
        cache of the first ``length`` ids and its bytes. Evicts the least recently used entries beyond
        the capacity; an entry larger than the whole capacity is not held. True when stored."""
        ids = tuple(tokens)
        if len(ids) < BLOCK_TOKENS or self.holds(owner, ids):
            return False
        kv, nbytes = kv_of(len(ids))
        if nbytes > self.capacity_bytes:
            return False
        entry = PrefixEntry(owner, prefix_key(ids), ids, kv, nbytes)
        with self._lock:
            entry_id = (owner, entry.key)
            if entry_id in self._entries:  # stored meanwhile (the scheduler is the only writer)
                return False
            self._entries[entry_id] = entry
            self._last_used[entry_id] = time.time()
            self._by_block.setdefault((owner, ids[:BLOCK_TOKENS]), set()).add(entry.key)
            self._bytes += nbytes
            self._changes.append(PrefixKvChange("stored", owner, entry.key, len(ids), nbytes))
            while self._bytes > self.capacity_bytes:
                self._evict(next(iter(self._entries)))
        return True

    def evict(self, owner: str, key: str) -> int:
        """Drop one entry; the bytes freed (0 when it was not held)."""
        with self._lock:
            if (owner, key) not in self._entries:
                return 0
            return self._evict((owner, key))

    def clear(self) -> list[PrefixKvChange]:
        """Drop every entry and candidate (the model's session is going): the entries dropped, not
        recorded as changes."""
        with self._lock:
            dropped = [PrefixKvChange("evicted", o, k, len(e.tokens), e.nbytes) for (o, k), e in self._entries.items()]
            self._entries.clear()
            self._last_used.clear()
            self._by_block.clear()
            self._candidates.clear()
            self._candidate_blocks.clear()
            self._bytes = 0
            return dropped

    def drain(self) -> list[PrefixKvChange]:
        """The entries stored and evicted since the last drain, in order."""
        with self._lock:
            changes, self._changes = self._changes, []
        return changes

    # -- accounting --------------------------------------------------------------------

    @property
    def total_bytes(self) -> int:
        with self._lock:
            return self._bytes

    def bytes_held(self, owner: str) -> int:
        with self._lock:
            return sum(e.nbytes for (o, _), e in self._entries.items() if o == owner)

    def usage(self) -> list[PrefixUsage]:
        """Every entry, least recently used first."""
        with self._lock:
            return [
                PrefixUsage(o, k, len(e.tokens), e.nbytes, self._last_used[(o, k)])
                for (o, k), e in self._entries.items()
            ]

    # -- internals (the lock held) -----------------------------------------------------

    def _touch(self, entry_id: tuple[str, str]) -> None:
        self._entries.move_to_end(entry_id)
        self._last_used[entry_id] = time.time()

    def _evict(self, entry_id: tuple[str, str]) -> int:
        entry = self._entries.pop(entry_id)
        del self._last_used[entry_id]
        block = (entry.owner, entry.tokens[:BLOCK_TOKENS])
        keys = self._by_block[block]
        keys.discard(entry.key)
        if not keys:
            del self._by_block[block]
        self._bytes -= entry.nbytes
        self._changes.append(PrefixKvChange("evicted", entry.owner, entry.key, len(entry.tokens), entry.nbytes))
        return entry.nbytes

    def _forget(self, owner: str, key: str, ids: Ids) -> None:
        """Drop a candidate (already out of its owner's candidates) from the first-block index."""
        block = (owner, tuple(int(t) for t in ids[:BLOCK_TOKENS]))
        keys = self._candidate_blocks[block]
        keys.discard(key)
        if not keys:
            del self._candidate_blocks[block]
