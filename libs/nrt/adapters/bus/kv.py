"""A compare-and-set key-value store: what shared state needs to change safely from several processes.

:class:`CasStore` is the contract (read a value with its revision; create a key that must not exist;
replace a value only if it is still at the revision read), :class:`JetStreamCas` its implementation on
a JetStream KV bucket (nats-py's ``KeyValue``: ``create`` and ``update(last=revision)``), and
``nrt.testing.memory_kv.MemoryCas`` an in-memory double that passes the same contract tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue


class StaleRevision(Exception):
    """The key is no longer at the revision the write expected (or, for a create, it exists): read again."""


@dataclass(frozen=True, slots=True)
class Versioned:
    value: bytes
    revision: int


class CasStore(Protocol):
    async def read(self, key: str) -> Versioned | None:
        """The key's value and revision, None when it has none."""
        ...

    async def write(self, key: str, value: bytes, last: int | None) -> int:
        """Store ``value`` if the key is at revision ``last`` (None: only if it has no value); its new revision.
        Raises :class:`StaleRevision` otherwise."""
        ...


class JetStreamCas:
    """:class:`CasStore` on a JetStream KV bucket."""

    def __init__(self, kv: KeyValue) -> None:
        self.kv = kv

    async def read(self, key: str) -> Versioned | None:
        try:
            entry = await self.kv.get(key)
        except KeyNotFoundError:
            return None
        return Versioned(value=entry.value or b"", revision=entry.revision or 0)

    async def write(self, key: str, value: bytes, last: int | None) -> int:
        try:
            if last is None:
                return await self.kv.create(key, value)
            return await self.kv.update(key, value, last=last)
        except KeyWrongLastSequenceError as exc:
            raise StaleRevision(f"{key}: {exc}") from None
