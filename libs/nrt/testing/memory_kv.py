"""An in-memory :class:`nrt.adapters.bus.kv.CasStore`: fast tests of shared state, no server.

It keeps JetStream's revision semantics: one revision counter for the whole bucket (a stream's
sequence), so a key's revision changes on every write and never repeats.
"""

from __future__ import annotations

import asyncio

from nrt.adapters.bus.kv import StaleRevision, Versioned


class MemoryCas:
    def __init__(self) -> None:
        self.values: dict[str, Versioned] = {}
        self.sequence = 0
        self.reads = 0
        self.writes = 0  # every attempt, refused ones too: what a round trip would cost

    async def read(self, key: str) -> Versioned | None:
        await asyncio.sleep(0)  # a round trip lets other tasks run, as the real one does
        self.reads += 1
        return self.values.get(key)

    async def write(self, key: str, value: bytes, last: int | None) -> int:
        await asyncio.sleep(0)
        self.writes += 1
        current = self.values.get(key)
        if (current.revision if current is not None else None) != last:
            raise StaleRevision(f"{key}: at revision {current.revision if current else None}, not {last}")
        self.sequence += 1
        self.values[key] = Versioned(value=value, revision=self.sequence)
        return self.sequence
