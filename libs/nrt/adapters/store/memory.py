"""An event store in this process's memory, with the PostgreSQL store's semantics.

Same positions, stream versions, optimistic concurrency, idempotency by event id, hash
chain (``nrt.core.eventlog.hashchain``), canonical bodies (``nrt.core.events.encode``), replay order,
verification, checkpoints and leadership (lease, fencing epoch) as ``nrt.adapters.store.EventStore``: both pass the contract tests in
``tests/integration/store/test_contract.py``. For handler tests and tools that need a log but no
server. Appends are atomic because nothing in them awaits.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta

import msgspec

from nrt.core.eventlog.decisions import MAX_ROUNDS, Decide, DecidedAppend, DecisionLog, OutboxEntry, too_many_rounds
from nrt.core.eventlog.hashchain import GENESIS, link, verify_rows
from nrt.core.eventlog.leadership import Fenced, Lease, LeaseStore, OnFenced, expired
from nrt.core.eventlog.records import (
    AppendResult,
    ChainReport,
    ChainRow,
    Checkpoint,
    ConcurrencyError,
    RecordedEvent,
    ReplayedEvent,
    Snapshot,
)
from nrt.core.events import Event, decode, schema_version, utc_now


class StoredRow(msgspec.Struct, frozen=True, kw_only=True):
    """One row of the log, as the PostgreSQL table holds it."""

    position: int
    event_id: str  # canonical UUID text
    stream_id: str
    stream_version: int
    type: str
    schema_version: int  # the version that wrote ``body`` (older ones are upcast on reading)
    occurred_at: datetime
    recorded_at: datetime
    body: bytes  # the canonical encoding the hash covers
    prev_hash: bytes
    hash: bytes


def _event_key(event: Event) -> str:
    """The event id as the log keys it (canonical UUID text); a clear error when it is not a UUID."""
    try:
        return str(uuid.UUID(event.event_id))
    except ValueError:
        raise ValueError(
            f"{event.type} has event id {event.event_id!r}, which is not a UUID; the log keys events by UUID"
        ) from None


def _recorded(row: StoredRow) -> RecordedEvent:
    return RecordedEvent(
        position=row.position,
        stream_id=row.stream_id,
        stream_version=row.stream_version,
        recorded_at=row.recorded_at,
        event=decode(row.body, row.schema_version),
    )


class InMemoryEventStore(DecisionLog, LeaseStore):
    """The event log in a dict; ``clock`` stamps ``recorded_at`` (one value per append, like a transaction)
    and is the leadership's clock."""

    def __init__(self, clock: Callable[[], datetime] = utc_now) -> None:
        self._clock = clock
        self._rows: dict[int, StoredRow] = {}  # position -> row, in position order
        self._ids: dict[str, int] = {}  # event id -> position
        self._versions: dict[str, int] = {}  # stream id -> last version
        self._streams: dict[str, list[int]] = {}  # stream id -> positions, by version
        self._checkpoints: dict[str, int] = {}
        self._snapshots: dict[tuple[int, int], Snapshot] = {}  # (position, fold version) -> snapshot
        self._outbox: list[int] = []  # positions of decided events not yet published
        self._leadership = Lease(epoch=0, holder="", until=datetime(1970, 1, 1, tzinfo=UTC))
        self._fence: tuple[int, OnFenced | None] | None = None  # (epoch, told when refused): see ``fence``

    async def close(self) -> None:
        """Nothing to release; the log stays readable."""

    # -- writing -------------------------------------------------------------------------

    async def append(
        self,
        events: Sequence[Event],
        expected_versions: Mapping[str, int] | None = None,
        checkpoint: Checkpoint | None = None,
    ) -> AppendResult:
        self._check_fence()
        keys = [_event_key(event) for event in events]
        fresh: list[Event] = []
        fresh_keys: list[str] = []
        seen: set[str] = set()
        for key, event in zip(keys, events, strict=True):
            if key not in self._ids and key not in seen:
                seen.add(key)
                fresh.append(event)
                fresh_keys.append(key)
        streams = {event.stream_id for event in fresh}
        for stream_id, expected in (expected_versions or {}).items():
            actual = self._versions.get(stream_id, 0)
            if actual != expected and stream_id in streams:
                raise ConcurrencyError(stream_id, expected, actual)
        if checkpoint is not None:
            self._checkpoints[checkpoint.consumer] = checkpoint.sequence
        head, prev_hash = self._tail()
        versions = {stream_id: self._versions.get(stream_id, 0) for stream_id in streams}
        recorded_at = self._clock()
        recorded: list[RecordedEvent] = []
        for key, chained in zip(fresh_keys, link(fresh, versions, head, prev_hash), strict=True):
            event = chained.event
            self._rows[chained.position] = StoredRow(
                position=chained.position,
                event_id=key,
                stream_id=chained.stream_id,
                stream_version=chained.stream_version,
                type=event.type,
                schema_version=schema_version(event.type),
                occurred_at=event.occurred_at,
                recorded_at=recorded_at,
                body=chained.body,
                prev_hash=chained.prev_hash,
                hash=chained.hash,
            )
            self._ids[key] = chained.position
            self._streams.setdefault(chained.stream_id, []).append(chained.position)
            recorded.append(
                RecordedEvent(
                    position=chained.position,
                    stream_id=chained.stream_id,
                    stream_version=chained.stream_version,
                    recorded_at=recorded_at,
                    event=event,  # type: ignore[arg-type]  # an Event of the schema is one of AnyEvent
                )
            )
        self._versions.update(versions)
        return AppendResult(recorded=recorded, duplicates=len(events) - len(fresh), head=self._tail()[0])

    # -- decisions and their outbox (nrt.core.eventlog.decisions) -------------------------------

    async def append_decided(
        self, causes: Sequence[Event], decide: Decide, checkpoint: Checkpoint | None = None
    ) -> DecidedAppend:
        """Like the PostgreSQL store: all or nothing (the log is put back if ``decide`` or an append fails)."""
        self._check_fence()
        saved = (dict(self._rows), dict(self._ids), dict(self._versions), self._streams, list(self._outbox))
        self._streams = {stream_id: list(positions) for stream_id, positions in self._streams.items()}
        try:
            result = await self.append(causes)
            recorded, decided = result.recorded, list[RecordedEvent]()
            for _ in range(MAX_ROUNDS):
                decision = decide(recorded)
                if not decision.events:
                    break
                expected = self._versions_at({e.stream_id for e in decision.events}, decision.seen)
                recorded = (await self.append(decision.events, expected)).recorded
                self._outbox += [r.position for r in recorded]
                decided += recorded
            else:
                raise too_many_rounds()
        except BaseException:
            self._rows, self._ids, self._versions, self._streams, self._outbox = saved
            raise
        if checkpoint is not None:
            self._checkpoints[checkpoint.consumer] = checkpoint.sequence
        return DecidedAppend(causes=result, decided=decided)

    def _versions_at(self, streams: set[str], position: int) -> dict[str, int]:
        """Each stream's version as of ``position`` (0: none yet), read once per stream."""
        return {s: sum(1 for at in self._streams.get(s, ()) if at <= position) for s in streams}

    async def unpublished(self, limit: int = 500) -> list[OutboxEntry]:
        rows = [self._rows[position] for position in self._outbox[:limit]]
        return [
            OutboxEntry(
                position=r.position, event_id=r.event_id, type=r.type, schema_version=r.schema_version, body=r.body
            )
            for r in rows
        ]

    async def mark_published(self, positions: Sequence[int]) -> None:
        self._check_fence()
        done = set(positions)
        self._outbox = [position for position in self._outbox if position not in done]

    def _tail(self) -> tuple[int, bytes]:
        last = next(reversed(self._rows.values()), None)
        return (last.position, last.hash) if last is not None else (0, GENESIS)

    def tamper_with_row(self, position: int, change: Callable[[StoredRow], StoredRow | None]) -> None:
        """Test hook: what someone with access to the storage could do behind the store's back.

        ``change`` gets the row stored at ``position`` and returns what is stored there
        instead (its hashes are whatever it leaves them), or None to delete the row. The
        log's own code never calls this.
        """
        row = self._rows.get(position)
        if row is None:
            raise KeyError(f"the log has no row at position {position}")
        changed = change(row)
        if changed is None:
            del self._rows[position]
        else:
            self._rows[position] = changed

    # -- leadership (nrt.core.eventlog.leadership) ------------------------------------------

    def fence(self, epoch: int, on_fenced: OnFenced | None = None) -> None:
        self._fence = (epoch, on_fenced)

    def _check_fence(self) -> None:
        if self._fence is None:
            return
        epoch, on_fenced = self._fence
        if self._leadership.epoch != epoch:
            refused = Fenced(epoch, self._leadership.epoch)
            if on_fenced is not None:
                on_fenced(refused)
            raise refused

    async def claim(self, holder: str, lease_s: float) -> Lease | None:
        now = self._clock()
        if not expired(self._leadership, now):
            return None
        self._leadership = Lease(
            epoch=self._leadership.epoch + 1, holder=holder, until=now + timedelta(seconds=lease_s)
        )
        return self._leadership

    async def renew(self, lease: Lease, lease_s: float) -> Lease | None:
        if self._leadership.epoch != lease.epoch:
            return None
        self._leadership = Lease(
            epoch=lease.epoch, holder=self._leadership.holder, until=self._clock() + timedelta(seconds=lease_s)
        )
        return self._leadership

    async def release(self, lease: Lease) -> None:
        if self._leadership.epoch == lease.epoch:
            self._leadership = Lease(epoch=lease.epoch, holder=self._leadership.holder, until=self._clock())

    async def leader(self) -> Lease | None:
        return self._leadership if self._leadership.epoch > 0 else None

    # -- reading -------------------------------------------------------------------------

    async def head(self) -> int:
        return self._tail()[0]

    async def stream_version(self, stream_id: str) -> int:
        return self._versions.get(stream_id, 0)

    async def read_stream(self, stream_id: str, from_version: int = 1) -> list[RecordedEvent]:
        rows = (self._rows.get(position) for position in self._streams.get(stream_id, ()))
        return [_recorded(row) for row in rows if row is not None and row.stream_version >= from_version]

    async def read_positions(
        self, start: int = 1, end: int | None = None, page: int = 5_000
    ) -> AsyncIterator[RecordedEvent]:
        """Events with ``start <= position <= end`` in order; like the PostgreSQL store's pages, it
        reads on to the head as it is when it gets there."""
        position = start
        while end is None or position <= end:
            if position > self._tail()[0]:
                return
            row = self._rows.get(position)
            if row is not None:
                yield _recorded(row)
            position += 1

    async def replay(self, start: int = 1, end: int | None = None, page: int = 10_000) -> AsyncIterator[ReplayedEvent]:
        """``(position, event)`` from the log as it was when the replay began (later appends are not seen)."""
        last = self._tail()[0] if end is None else min(end, self._tail()[0])
        rows = [row for position in range(start, last + 1) if (row := self._rows.get(position)) is not None]
        for row in rows:
            yield row.position, decode(row.body, row.schema_version)

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
        wanted = set(types)
        found: list[RecordedEvent] = []
        for position in range(after_position + 1, self._tail()[0] + 1):
            row = self._rows.get(position)
            if len(found) >= limit:
                break
            if (
                row is not None
                and (stream_id is None or row.stream_id == stream_id)
                and (stream_prefix is None or row.stream_id.startswith(stream_prefix))
                and (not wanted or row.type in wanted)
                and (since is None or row.occurred_at >= since)
                and (until is None or row.occurred_at <= until)
            ):
                found.append(_recorded(row))
        return found

    async def position_at(self, moment: datetime) -> int:
        return max((row.position for row in self._rows.values() if row.occurred_at <= moment), default=0)

    # -- auditing ------------------------------------------------------------------------

    async def chain_rows(self, start: int = 1, end: int | None = None, page: int = 10_000) -> AsyncIterator[ChainRow]:
        for row in list(self._rows.values()):
            if row.position >= start and (end is None or row.position <= end):
                yield ChainRow(
                    position=row.position,
                    event_id=row.event_id,
                    stream_id=row.stream_id,
                    stream_version=row.stream_version,
                    body=row.body,
                    prev_hash=row.prev_hash,
                    hash=row.hash,
                )

    async def verify(self, page: int = 10_000) -> ChainReport:
        return await verify_rows(self.chain_rows(page=page))

    # -- snapshots -------------------------------------------------------------------------

    async def save_snapshot(self, position: int, fold_version: int, state: bytes) -> Snapshot:
        self._check_fence()
        row = self._rows.get(position)
        if row is None:
            raise ValueError(f"the log has no row at position {position}: a snapshot must name a recorded position")
        snapshot = Snapshot(
            position=position, fold_version=fold_version, state=state, chain_hash=row.hash, created_at=self._clock()
        )
        self._snapshots[(position, fold_version)] = snapshot
        return snapshot

    async def latest_snapshot(self, fold_version: int, at_or_before: int | None = None) -> Snapshot | None:
        candidates = [
            s
            for (position, version), s in self._snapshots.items()
            if version == fold_version
            and (at_or_before is None or position <= at_or_before)
            and (row := self._rows.get(position)) is not None
            and row.hash == s.chain_hash
        ]
        return max(candidates, key=lambda s: s.position, default=None)

    async def snapshots(self) -> list[Snapshot]:
        return [self._snapshots[key] for key in sorted(self._snapshots)]

    def tamper_with_snapshot(self, position: int, fold_version: int, state: bytes) -> None:
        """Test hook: replace a stored snapshot's state behind the store's back (its hash is kept)."""
        key = (position, fold_version)
        self._snapshots[key] = msgspec.structs.replace(self._snapshots[key], state=state)

    # -- consumer checkpoints ------------------------------------------------------------

    async def save_checkpoint(self, checkpoint: Checkpoint) -> None:
        self._check_fence()
        self._checkpoints[checkpoint.consumer] = checkpoint.sequence

    async def checkpoint(self, consumer: str) -> int:
        return self._checkpoints.get(consumer, 0)
