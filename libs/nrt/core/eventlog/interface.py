"""The event log as its users see it: the one interface every event store implements.

``nrt.adapters.store.EventStore`` keeps it in PostgreSQL, ``nrt.adapters.store.InMemoryEventStore`` in
this process (tests, tools). Both pass the same contract tests
(``tests/integration/store/test_contract.py``); code that only appends, reads and verifies the log
takes an ``EventLog``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime
from typing import Protocol

from nrt.core.eventlog.records import (
    AppendResult,
    ChainReport,
    ChainRow,
    Checkpoint,
    RecordedEvent,
    ReplayedEvent,
    Snapshot,
)
from nrt.core.events import Event


class EventLog(Protocol):
    """An append-only, hash-chained log of events.

    Every event gets a gapless global ``position`` (from 1) and, within its stream (the
    event's ``stream_id``), a gapless ``stream_version`` (from 1).
    """

    async def append(
        self,
        events: Sequence[Event],
        expected_versions: Mapping[str, int] | None = None,
        checkpoint: Checkpoint | None = None,
    ) -> AppendResult:
        """Append ``events`` in order, atomically.

        ``expected_versions`` maps a stream id to the version the caller last saw (0: the
        stream must not exist yet); when the stream has moved on and the batch holds new
        events of it, ConcurrencyError is raised and nothing is stored. Events whose id is
        already stored (or repeated in the batch) are skipped, so re-delivering a batch is a
        no-op. ``checkpoint`` is stored with the events, even when all were duplicates.
        """
        ...

    async def head(self) -> int:
        """The last position (0 for an empty log)."""
        ...

    async def stream_version(self, stream_id: str) -> int:
        """The stream's last version (0 when it has no events)."""
        ...

    async def read_stream(self, stream_id: str, from_version: int = 1) -> list[RecordedEvent]:
        """The stream's events from ``from_version`` on, by version."""
        ...

    def read_positions(self, start: int = 1, end: int | None = None, page: int = 5_000) -> AsyncIterator[RecordedEvent]:
        """Events with ``start <= position <= end`` in position order, fetched ``page`` at a time."""
        ...

    def replay(self, start: int = 1, end: int | None = None, page: int = 10_000) -> AsyncIterator[ReplayedEvent]:
        """``(position, event)`` with ``start <= position <= end`` in order, from one snapshot:
        a replay to the head sees the log as it was when it began."""
        ...

    async def query(
        self,
        *,
        stream_id: str | None = None,
        stream_prefix: str | None = None,
        types: Sequence[str] = (),
        since: datetime | None = None,
        until: datetime | None = None,
        after_position: int = 0,
        limit: int = 1_000,
    ) -> list[RecordedEvent]:
        """Events matching every given filter, by position, at most ``limit`` after ``after_position``;
        ``since`` / ``until`` bound ``occurred_at`` (both inclusive)."""
        ...

    async def position_at(self, moment: datetime) -> int:
        """The last position whose event occurred at or before ``moment`` (0 if none)."""
        ...

    def chain_rows(self, start: int = 1, end: int | None = None, page: int = 10_000) -> AsyncIterator[ChainRow]:
        """The rows with ``start <= position <= end`` as stored (body bytes and hashes), in position order."""
        ...

    async def verify(self, page: int = 10_000) -> ChainReport:
        """Recompute the hash chain from the first row; name the first row that does not match."""
        ...

    async def save_checkpoint(self, checkpoint: Checkpoint) -> None:
        """Store ``checkpoint`` on its own (e.g. after skipping a message that is not an event)."""
        ...

    async def checkpoint(self, consumer: str) -> int:
        """The consumer's last stored sequence (0 when it has none)."""
        ...

    async def save_snapshot(self, position: int, fold_version: int, state: bytes) -> Snapshot:
        """Store ``state``, the fold of the log up to ``position``, with the hash of the row at
        ``position``; ValueError when the log has no row there. Saving one again replaces it."""
        ...

    async def latest_snapshot(self, fold_version: int, at_or_before: int | None = None) -> Snapshot | None:
        """The snapshot of ``fold_version`` with the highest position ``<= at_or_before`` (any when
        None) whose chain hash is the hash of the log's row at its position; None if there is none."""
        ...

    async def snapshots(self) -> list[Snapshot]:
        """Every stored snapshot, by position then fold version (for audits)."""
        ...

    async def close(self) -> None:
        """Release what the store holds (connections); the store is not used afterwards."""
        ...
