"""The conversations one model holds KV caches for on this worker, least recently used first.

A session is *in flight* while a request of it is being answered: its cache is out of the
store then, and it is never chosen for eviction. ``victims`` names the sessions to evict so
that at most ``max_active_sessions`` are held: the least recently used ones not in flight.
Pure bookkeeping, used from the event loop only.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Iterator


class SessionTable:
    def __init__(self) -> None:
        self._recent: OrderedDict[str, None] = OrderedDict()  # least recently used first
        self._in_flight: Counter[str] = Counter()

    def begin(self, session_id: str) -> bool:
        """A request of ``session_id`` starts; True when the session is new here."""
        new = session_id not in self._recent
        self.add(session_id)
        self._in_flight[session_id] += 1
        return new

    def end(self, session_id: str) -> None:
        """A request of ``session_id`` is over (answered or not): it is the most recently used."""
        self._in_flight[session_id] -= 1
        if self._in_flight[session_id] <= 0:
            del self._in_flight[session_id]
        if session_id in self._recent:
            self._recent.move_to_end(session_id)

    def add(self, session_id: str) -> None:
        """``session_id`` is held here, the most recently used."""
        self._recent[session_id] = None
        self._recent.move_to_end(session_id)

    def discard(self, session_id: str) -> None:
        self._recent.pop(session_id, None)

    def in_flight(self, session_id: str) -> bool:
        return self._in_flight[session_id] > 0

    def victims(self, limit: int) -> list[str]:
        """The least recently used sessions not in flight whose eviction leaves at most ``limit``
        (fewer when too many are in flight: those are evicted later, once they are idle)."""
        excess = len(self._recent) - limit
        if excess <= 0:
            return []
        idle = [sid for sid in self._recent if not self.in_flight(sid)]
        return idle[:excess]

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._recent

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._recent))

    def __len__(self) -> int:
        return len(self._recent)
