"""Per-conversation KV caches kept between turns, and the bytes each one holds.

A request that names a session takes that session's cache out of the store (so two
concurrent turns of one session never share arrays) and puts its own back when it
finishes. Thread-safe: the scheduler thread and the event loop both use it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from nrt.adapters.inference.kv import SessionKV
from nrt.adapters.inference.transcript import Transcript


@dataclass(frozen=True, slots=True)
class SessionUsage:
    """What one session's cache holds now."""

    session_id: str
    tokens: int
    nbytes: int
    last_used: float  # time.time() of the last put


@dataclass(frozen=True, slots=True)
class _Held:
    kv: SessionKV
    last_used: float


class SessionStore:
    """session id -> the KV cache of its last finished turn."""

    def __init__(self) -> None:
        self._held: dict[str, _Held] = {}
        self._lock = threading.Lock()

    def put(self, session_id: str, kv: SessionKV) -> None:
        with self._lock:
            self._held[session_id] = _Held(kv, time.time())

    def take(self, session_id: str) -> SessionKV | None:
        with self._lock:
            held = self._held.pop(session_id, None)
        return None if held is None else held.kv

    def transcript(self, session_id: str) -> Transcript | None:
        """The transcript of the session's last finished turn, left in place (None when none is held)."""
        with self._lock:
            held = self._held.get(session_id)
        return None if held is None else held.kv.transcript

    def evict(self, session_id: str) -> int:
        """Drop a session's cache; returns the bytes freed (0 when none was held)."""
        with self._lock:
            held = self._held.pop(session_id, None)
        return 0 if held is None else held.kv.nbytes

    def bytes_held(self, session_id: str) -> int:
        with self._lock:
            held = self._held.get(session_id)
        return 0 if held is None else held.kv.nbytes

    @property
    def total_bytes(self) -> int:
        with self._lock:
            return sum(h.kv.nbytes for h in self._held.values())

    def usage(self) -> list[SessionUsage]:
        with self._lock:
            items = list(self._held.items())
        return [SessionUsage(sid, len(h.kv.tokens), h.kv.nbytes, h.last_used) for sid, h in items]
