"""The event store: an append-only, hash-chained event log in PostgreSQL.

Appends are serialised by a transaction-scoped advisory lock, which gives gapless global
positions and a single hash chain. Within the lock an append skips events already stored
(idempotent by event id), checks expected stream versions (optimistic concurrency) and
writes the batch with COPY.

Leadership (``nrt.core.eventlog.leadership``): the ``leadership`` row holds the log's fencing epoch and
its leader's lease, on the database's clock. A store fenced at an epoch (``fence``; cluster_state's)
reads that row with ``FOR SHARE`` inside every write transaction and refuses the write (``Fenced``)
when the epoch has moved on; the share lock makes a takeover (an ``UPDATE`` of the row) wait for a
fenced write in flight. A fenced write transaction left idle for ``STALLED_WRITE_S`` (its writer was
stopped mid-transaction) is ended by the server, so a paused leader cannot hold a takeover back.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime
from typing import Any, cast

import psycopg
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from nrt.adapters.infra.pgurl import to_sqlalchemy
from nrt.adapters.store.tables import APPEND_COLUMNS
from nrt.core.eventlog.decisions import MAX_ROUNDS, Decide, DecidedAppend, DecisionLog, OutboxEntry, too_many_rounds
from nrt.core.eventlog.hashchain import GENESIS, link, verify_rows
from nrt.core.eventlog.leadership import Fenced, Lease, LeaseStore, OnFenced
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
from nrt.core.events import Event, decode, schema_version

APPEND_LOCK_KEY = 0x6E7274  # "nrt": one appender at a time holds it for its transaction
_COPY_SQL = f"COPY events ({', '.join(APPEND_COLUMNS)}) FROM STDIN"
_READ_COLUMNS = "position, stream_id, stream_version, recorded_at, body::text, schema_version"


STALLED_WRITE_S = 5.0  # a fenced write transaction idle this long is ended by the server (its writer stalled)
_FENCE_SQL = sa.text(
    "SELECT epoch, set_config('idle_in_transaction_session_timeout', :idle, true) "
    "FROM leadership WHERE id = 1 FOR SHARE"
)
_LEASE_COLUMNS = "epoch, holder, lease_until"
_CLAIM_SQL = sa.text(
    "UPDATE leadership SET epoch = epoch + 1, holder = :holder, lease_until = now() + make_interval(secs => :s) "
    f"WHERE id = 1 AND lease_until <= now() RETURNING {_LEASE_COLUMNS}"
)
_RENEW_SQL = sa.text(
    "UPDATE leadership SET lease_until = now() + make_interval(secs => :s) "
    f"WHERE id = 1 AND epoch = :epoch RETURNING {_LEASE_COLUMNS}"
)
_RELEASE_SQL = sa.text("UPDATE leadership SET lease_until = now() WHERE id = 1 AND epoch = :epoch")

_CHECKPOINT_SQL = sa.text(
    "INSERT INTO consumer_checkpoints (consumer, sequence, updated_at) VALUES (:c, :s, now()) "
    "ON CONFLICT (consumer) DO UPDATE SET sequence = EXCLUDED.sequence, updated_at = EXCLUDED.updated_at"
)


def _copy_text(value: str) -> str:
    """``value`` escaped for PostgreSQL's COPY text format."""
    if "\\" in value:
        value = value.replace("\\", "\\\\")
    if "\t" in value or "\n" in value or "\r" in value:
        value = value.replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return value


def _first_of_each(events: Sequence[Event]) -> list[Event]:
    """``events`` without repeated ids, keeping each id's first occurrence and the order."""
    seen: set[str] = set()
    unique: list[Event] = []
    for event in events:
        if event.event_id not in seen:
            seen.add(event.event_id)
            unique.append(event)
    return unique


def _expected_for(expected_versions: Mapping[str, int] | None) -> Mapping[str, int]:
    return expected_versions if expected_versions is not None else {}


class EventStore(DecisionLog, LeaseStore):
    """Append to and read from the event log. One instance per process; it owns an engine."""

    def __init__(self, engine: AsyncEngine, version_cache_size: int = 100_000) -> None:
        self.engine = engine
        self._fence: tuple[int, OnFenced | None] | None = None  # (epoch, told when refused): see ``fence``
        self._tail: tuple[int, bytes] | None = None  # (position, hash) of the last row, as last seen
        self._versions: OrderedDict[str, int] = OrderedDict()  # stream id -> version, as last seen
        self._version_cache_size = version_cache_size

    @classmethod
    def connect(cls, url: str, pool_size: int = 5) -> EventStore:
        return cls(create_async_engine(to_sqlalchemy(url), pool_size=pool_size, pool_pre_ping=True))

    async def close(self) -> None:
        await self.engine.dispose()

    # -- writing -------------------------------------------------------------------------

    async def append(
        self,
        events: Sequence[Event],
        expected_versions: Mapping[str, int] | None = None,
        checkpoint: Checkpoint | None = None,
    ) -> AppendResult:
        """Append ``events`` in order, atomically.

        ``expected_versions`` maps a stream id to the version the caller last saw (0: the
        stream must not exist yet); a mismatch raises ConcurrencyError and stores nothing.
        Events whose id is already stored are skipped, so re-delivering a batch is a no-op.
        ``checkpoint`` is stored in the same transaction as the events (even when every
        event was a duplicate), so a consumer's position never runs ahead of or behind its log.

        The fast path trusts this store's cache of the chain's tail and of stream versions
        and writes at once; the table's unique constraints (position, event id, stream
        version) reject any stale guess, and the append is then redone with every check
        read from the database. A conflict the cache sees is decided by the database too:
        the cache may be stale, and the batch may hold events already stored.
        """
        if self._cache_covers(expected_versions):
            try:
                result = await self._append_optimistic(events, expected_versions, checkpoint)
            except (psycopg.errors.UniqueViolation, sa.exc.IntegrityError):
                self._forget()
            else:
                if result is not None:
                    return result
        return await self._append_checked(events, expected_versions, checkpoint)

    def _cache_covers(self, expected_versions: Mapping[str, int] | None) -> bool:
        return self._tail is not None and all(s in self._versions for s in _expected_for(expected_versions))

    def _forget(self) -> None:
        self._tail = None
        self._versions.clear()

    def _remember(self, recorded: list[RecordedEvent], versions: Mapping[str, int], tail: tuple[int, bytes]) -> None:
        self._tail = tail
        for stream_id, version in versions.items():
            self._versions[stream_id] = version
            self._versions.move_to_end(stream_id)
        while len(self._versions) > self._version_cache_size:
            self._versions.popitem(last=False)

    async def _append_optimistic(
        self, events: Sequence[Event], expected_versions: Mapping[str, int] | None, checkpoint: Checkpoint | None
    ) -> AppendResult | None:
        """The append on the cached tail and versions; None when the cache sees a conflict."""
        assert self._tail is not None
        fresh = _first_of_each(events)
        duplicates = len(events) - len(fresh)
        versions = {e.stream_id: self._versions.get(e.stream_id, 0) for e in fresh}
        for stream_id, expected in _expected_for(expected_versions).items():
            if self._versions[stream_id] != expected and stream_id in versions:
                return None
        head, prev_hash = self._tail
        if not fresh:
            if checkpoint is not None:
                await self.save_checkpoint(checkpoint)
            return AppendResult(recorded=[], duplicates=duplicates, head=head)
        data, recorded, tail = self._rows(fresh, versions, head, prev_hash)
        async with self.engine.begin() as conn:
            await conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": APPEND_LOCK_KEY})
            await self._check_fence(conn)
            await self._copy(conn, data)
            await self._write_checkpoint(conn, checkpoint)
        self._remember(recorded, versions, tail)
        return AppendResult(recorded=recorded, duplicates=duplicates, head=tail[0])

    async def _append_checked(
        self, events: Sequence[Event], expected_versions: Mapping[str, int] | None, checkpoint: Checkpoint | None
    ) -> AppendResult:
        async with self.engine.begin() as conn:
            await conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": APPEND_LOCK_KEY})
            await self._check_fence(conn)
            result, versions, tail = await self._append_in(conn, events, expected_versions)
            await self._write_checkpoint(conn, checkpoint)
        self._remember(result.recorded, versions, tail)
        return result

    async def _append_in(
        self,
        conn: AsyncConnection,
        events: Sequence[Event],
        expected_versions: Mapping[str, int] | None,
        tail: tuple[int, bytes] | None = None,
        current: Mapping[str, int] | None = None,
    ) -> tuple[AppendResult, dict[str, int], tuple[int, bytes]]:
        """The checked append inside a transaction holding the append lock: the result, the stream
        versions it saw or wrote, and the new tail. ``tail``: the one an earlier append of this
        transaction left (None: read it). ``current``: the versions of every stream of ``events``
        and ``expected_versions`` as this transaction already read them (None: read them)."""
        fresh = await self._unseen(conn, events)
        duplicates = len(events) - len(fresh)
        streams = {e.stream_id for e in fresh} | set(_expected_for(expected_versions))
        versions = dict(current) if current is not None else await self._stream_versions(conn, streams)
        for stream_id, expected in _expected_for(expected_versions).items():
            actual = versions.get(stream_id, 0)
            if actual != expected and any(e.stream_id == stream_id for e in fresh):
                raise ConcurrencyError(stream_id, expected, actual)
        head, prev_hash = tail if tail is not None else await self._head(conn)
        known = {stream_id: versions.get(stream_id, 0) for stream_id in streams}
        if not fresh:
            return AppendResult(recorded=[], duplicates=duplicates, head=head), known, (head, prev_hash)
        data, recorded, tail = self._rows(fresh, versions, head, prev_hash)
        await self._copy(conn, data)
        return AppendResult(recorded=recorded, duplicates=duplicates, head=tail[0]), {**known, **versions}, tail

    @staticmethod
    async def _unseen(conn: AsyncConnection, events: Sequence[Event]) -> list[Event]:
        unique = _first_of_each(events)
        if not unique:
            return []
        stored = await conn.execute(
            sa.text("SELECT event_id::text FROM events WHERE event_id = ANY(CAST(:ids AS uuid[]))"),
            {"ids": [e.event_id for e in unique]},
        )
        seen = {row[0] for row in stored}
        return [e for e in unique if e.event_id not in seen]

    @staticmethod
    async def _stream_versions(conn: AsyncConnection, streams: set[str]) -> dict[str, int]:
        if not streams:
            return {}
        result = await conn.execute(
            sa.text(
                "SELECT s.stream_id, (SELECT max(stream_version) FROM events e WHERE e.stream_id = s.stream_id) "
                "FROM unnest(CAST(:streams AS text[])) AS s(stream_id)"
            ),
            {"streams": sorted(streams)},
        )
        return {stream_id: version for stream_id, version in result if version is not None}

    @staticmethod
    async def _head(conn: AsyncConnection) -> tuple[int, bytes]:
        row = (await conn.execute(sa.text("SELECT position, hash FROM events ORDER BY position DESC LIMIT 1"))).first()
        return (int(row[0]), bytes(row[1])) if row is not None else (0, GENESIS)

    @staticmethod
    def _rows(
        fresh: list[Event], versions: dict[str, int], head: int, prev_hash: bytes
    ) -> tuple[bytes, list[RecordedEvent], tuple[int, bytes]]:
        """The batch as COPY text-format rows, the records the append returns, and the new tail."""
        lines: list[str] = []
        recorded: list[RecordedEvent] = []
        links = link(fresh, versions, head, prev_hash)
        for event, position, stream_id, version, body, prev, digest in links:
            type_name = event.type
            lines.append(
                f"{position}\t{event.event_id}\t{_copy_text(stream_id)}\t{version}\t{type_name}\t"
                f"{schema_version(type_name)}\t{event.occurred_at.isoformat()}\t{_copy_text(body.decode())}\t"
                f"\\\\x{prev.hex()}\t\\\\x{digest.hex()}\n"
            )
            recorded.append(
                RecordedEvent(
                    position=position,
                    stream_id=stream_id,
                    stream_version=version,
                    recorded_at=None,
                    event=event,  # type: ignore[arg-type]
                )
            )
        tail = (links[-1].position, links[-1].hash) if links else (head, prev_hash)
        return "".join(lines).encode(), recorded, tail

    @staticmethod
    async def _copy(conn: AsyncConnection, data: bytes) -> None:
        raw = await conn.get_raw_connection()
        driver = raw.driver_connection
        assert driver is not None
        async with driver.cursor() as cursor, cursor.copy(_COPY_SQL) as copy:
            await copy.write(data)

    # -- decisions and their outbox (nrt.core.eventlog.decisions) -------------------------------

    async def append_decided(
        self, causes: Sequence[Event], decide: Decide, checkpoint: Checkpoint | None = None
    ) -> DecidedAppend:
        """Append ``causes``, the decisions derived from them and ``checkpoint`` in one transaction."""
        decided: list[RecordedEvent] = []
        try:
            async with self.engine.begin() as conn:
                await conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": APPEND_LOCK_KEY})
                await self._check_fence(conn)
                result, _, tail = await self._append_in(conn, causes, None)
                recorded = result.recorded
                for _ in range(MAX_ROUNDS):
                    decision = decide(recorded)
                    if not decision.events:
                        break
                    streams = {e.stream_id for e in decision.events}
                    expected, current = await self._versions_seen_and_now(conn, streams, decision.seen)
                    appended, _, tail = await self._append_in(conn, decision.events, expected, tail, current)
                    recorded = appended.recorded
                    if recorded:
                        await conn.execute(
                            sa.text("INSERT INTO decision_outbox (position) SELECT unnest(CAST(:p AS bigint[]))"),
                            {"p": [r.position for r in recorded]},
                        )
                    decided += recorded
                else:
                    raise too_many_rounds()
                await self._write_checkpoint(conn, checkpoint)
        finally:
            self._forget()  # the next append reads the tail and versions from the database
        return DecidedAppend(causes=result, decided=decided)

    @staticmethod
    async def _versions_seen_and_now(
        conn: AsyncConnection, streams: set[str], position: int
    ) -> tuple[dict[str, int], dict[str, int]]:
        """In one read, each stream's version as of ``position`` (0: none yet), which is what a
        decider that folded that far saw, and its version now (a stream with no event left out)."""
        result = await conn.execute(
            sa.text(
                "SELECT s.stream_id, (SELECT coalesce(max(stream_version), 0) FROM events e "
                "WHERE e.stream_id = s.stream_id AND e.position <= :at), "
                "(SELECT max(stream_version) FROM events e WHERE e.stream_id = s.stream_id) "
                "FROM unnest(CAST(:streams AS text[])) AS s(stream_id)"
            ),
            {"streams": sorted(streams), "at": position},
        )
        seen: dict[str, int] = {}
        now: dict[str, int] = {}
        for stream_id, at_position, version in result:
            seen[stream_id] = int(at_position)
            if version is not None:
                now[stream_id] = int(version)
        return seen, now

    async def unpublished(self, limit: int = 500) -> list[OutboxEntry]:
        async with self.engine.connect() as conn:
            result = await conn.execute(
                sa.text(
                    "SELECT o.position, e.event_id::text, e.type, e.schema_version, e.body::text "
                    "FROM decision_outbox o JOIN events e USING (position) ORDER BY o.position LIMIT :n"
                ),
                {"n": limit},
            )
            return [
                OutboxEntry(position=p, event_id=i, type=t, schema_version=v, body=b.encode())
                for p, i, t, v, b in result
            ]

    async def mark_published(self, positions: Sequence[int]) -> None:
        async with self.engine.begin() as conn:
            await self._check_fence(conn)
            await conn.execute(
                sa.text("DELETE FROM decision_outbox WHERE position = ANY(CAST(:p AS bigint[]))"),
                {"p": list(positions)},
            )

    # -- leadership (nrt.core.eventlog.leadership) ------------------------------------------

    def fence(self, epoch: int, on_fenced: OnFenced | None = None) -> None:
        self._fence = (epoch, on_fenced)

    async def _check_fence(self, conn: AsyncConnection) -> None:
        """Inside a write transaction: refuse it unless the log is still led at this store's epoch."""
        if self._fence is None:
            return
        epoch, on_fenced = self._fence
        idle = f"{int(STALLED_WRITE_S * 1000)}ms"
        row = (await conn.execute(_FENCE_SQL, {"idle": idle})).first()
        current = int(row[0]) if row is not None else 0
        if current != epoch:
            refused = Fenced(epoch, current)
            if on_fenced is not None:
                on_fenced(refused)
            raise refused

    async def _lease(self, sql: sa.TextClause, params: dict[str, object]) -> Lease | None:
        async with self.engine.begin() as conn:
            row = (await conn.execute(sql, params)).first()
        return Lease(epoch=int(row[0]), holder=row[1], until=row[2]) if row is not None else None

    async def claim(self, holder: str, lease_s: float) -> Lease | None:
        return await self._lease(_CLAIM_SQL, {"holder": holder, "s": lease_s})

    async def renew(self, lease: Lease, lease_s: float) -> Lease | None:
        return await self._lease(_RENEW_SQL, {"epoch": lease.epoch, "s": lease_s})

    async def release(self, lease: Lease) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(_RELEASE_SQL, {"epoch": lease.epoch})

    async def leader(self) -> Lease | None:
        lease = await self._lease(sa.text(f"SELECT {_LEASE_COLUMNS} FROM leadership WHERE id = 1"), {})
        return lease if lease is not None and lease.epoch > 0 else None

    # -- reading -------------------------------------------------------------------------

    async def head(self) -> int:
        async with self.engine.connect() as conn:
            return (await self._head(conn))[0]

    async def stream_version(self, stream_id: str) -> int:
        async with self.engine.connect() as conn:
            return (await self._stream_versions(conn, {stream_id})).get(stream_id, 0)

    async def read_stream(self, stream_id: str, from_version: int = 1) -> list[RecordedEvent]:
        query = (
            f"SELECT {_READ_COLUMNS} FROM events WHERE stream_id = :stream AND stream_version >= :v "
            "ORDER BY stream_version"
        )
        async with self.engine.connect() as conn:
            result = await conn.execute(sa.text(query), {"stream": stream_id, "v": from_version})
            return [_recorded(row) for row in result]

    async def read_positions(
        self, start: int = 1, end: int | None = None, page: int = 5_000
    ) -> AsyncIterator[RecordedEvent]:
        """Events with ``start <= position <= end`` in order, fetched a page at a time."""
        cursor = start
        while end is None or cursor <= end:
            upper = cursor + page - 1 if end is None else min(cursor + page - 1, end)
            async with self.engine.connect() as conn:
                result = await conn.execute(
                    sa.text(f"SELECT {_READ_COLUMNS} FROM events WHERE position BETWEEN :lo AND :hi ORDER BY position"),
                    {"lo": cursor, "hi": upper},
                )
                rows = result.all()
            if not rows:
                return
            for row in rows:
                yield _recorded(row)
            cursor = upper + 1

    async def replay(self, start: int = 1, end: int | None = None, page: int = 10_000) -> AsyncIterator[ReplayedEvent]:
        """``(position, event)`` with ``start <= position <= end`` in order: what a fold needs, nothing more.

        One read-only snapshot (REPEATABLE READ) over one connection, so a replay to the head
        sees the log as it was when it began; only the position, the body and its schema version
        are read, on the driver's own cursor. The next page is asked for before the current one is
        handed out, so the server reads it while the caller folds this one.
        """
        async with self.engine.connect() as conn:
            await conn.execution_options(isolation_level="REPEATABLE READ")
            async with conn.begin():
                await conn.exec_driver_sql("SET TRANSACTION READ ONLY")
                raw = await conn.get_raw_connection()
                driver = raw.driver_connection
                assert driver is not None
                async with driver.cursor() as cursor:
                    pages = _Pages(cursor, start, end, page)
                    ahead: asyncio.Future[list[tuple[int, str, int]]] | None = None
                    try:
                        rows = await pages.next()
                        while rows:
                            ahead = await pages.ask()  # the server works on it while this page is folded
                            for position, body, version in rows:
                                yield position, decode(body, version)  # an older version goes through its upcasters
                            rows = await ahead
                    finally:
                        if ahead is not None and not ahead.done():  # the caller stopped early: let the query end
                            with contextlib.suppress(Exception):
                                await ahead

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
        """Events matching every given filter, by position; time filters use ``occurred_at``."""
        clauses = ["position > :after"]
        params: dict[str, Any] = {"after": after_position, "limit": limit}
        if stream_id is not None:
            clauses.append("stream_id = :stream")
            params["stream"] = stream_id
        if stream_prefix is not None:
            clauses.append("stream_id LIKE :prefix")
            params["prefix"] = stream_prefix.replace("%", r"\%").replace("_", r"\_") + "%"
        if types:
            clauses.append("type = ANY(CAST(:types AS text[]))")
            params["types"] = list(types)
        if since is not None:
            clauses.append("occurred_at >= :since")
            params["since"] = since
        if until is not None:
            clauses.append("occurred_at <= :until")
            params["until"] = until
        sql = f"SELECT {_READ_COLUMNS} FROM events WHERE {' AND '.join(clauses)} ORDER BY position LIMIT :limit"
        async with self.engine.connect() as conn:
            return [_recorded(row) for row in await conn.execute(sa.text(sql), params)]

    async def position_at(self, moment: datetime) -> int:
        """The last position whose event occurred at or before ``moment`` (0 if none)."""
        async with self.engine.connect() as conn:
            value = await conn.scalar(
                sa.text("SELECT coalesce(max(position), 0) FROM events WHERE occurred_at <= :t"), {"t": moment}
            )
            return int(value or 0)

    # -- auditing ------------------------------------------------------------------------

    async def chain_rows(self, start: int = 1, end: int | None = None, page: int = 10_000) -> AsyncIterator[ChainRow]:
        cursor = start
        while True:
            async with self.engine.connect() as conn:
                result = await conn.execute(
                    sa.text(
                        "SELECT position, event_id::text, stream_id, stream_version, body::text, prev_hash, hash "
                        "FROM events WHERE position >= :lo AND position <= :hi ORDER BY position LIMIT :n"
                    ),
                    {"lo": cursor, "hi": end if end is not None else 2**62, "n": page},
                )
                rows = result.all()
            if not rows:
                return
            for position, event_id, stream_id, version, body, prev, digest in rows:
                yield ChainRow(
                    position=position,
                    event_id=event_id,
                    stream_id=stream_id,
                    stream_version=version,
                    body=body.encode(),
                    prev_hash=bytes(prev),
                    hash=bytes(digest),
                )
            cursor = rows[-1][0] + 1

    async def verify(self, page: int = 10_000) -> ChainReport:
        """Recompute the chain from the first row; name the first row that does not match."""
        return await verify_rows(self.chain_rows(page=page))

    # -- snapshots -------------------------------------------------------------------------

    async def save_snapshot(self, position: int, fold_version: int, state: bytes) -> Snapshot:
        async with self.engine.begin() as conn:
            await self._check_fence(conn)
            row = (
                await conn.execute(
                    sa.text(
                        "INSERT INTO snapshots (position, fold_version, state, chain_hash) "
                        "SELECT position, :v, :state, hash FROM events WHERE position = :p "
                        "ON CONFLICT (position, fold_version) DO UPDATE "
                        "SET state = EXCLUDED.state, chain_hash = EXCLUDED.chain_hash, created_at = now() "
                        "RETURNING chain_hash, created_at"
                    ),
                    {"p": position, "v": fold_version, "state": state},
                )
            ).first()
        if row is None:
            raise ValueError(f"the log has no row at position {position}: a snapshot must name a recorded position")
        return Snapshot(
            position=position, fold_version=fold_version, state=state, chain_hash=bytes(row[0]), created_at=row[1]
        )

    async def latest_snapshot(self, fold_version: int, at_or_before: int | None = None) -> Snapshot | None:
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(
                    sa.text(
                        "SELECT s.position, s.state, s.chain_hash, s.created_at FROM snapshots s "
                        "JOIN events e ON e.position = s.position AND e.hash = s.chain_hash "
                        "WHERE s.fold_version = :v AND s.position <= :p ORDER BY s.position DESC LIMIT 1"
                    ),
                    {"v": fold_version, "p": at_or_before if at_or_before is not None else 2**62},
                )
            ).first()
        if row is None:
            return None
        return Snapshot(
            position=row[0], fold_version=fold_version, state=bytes(row[1]), chain_hash=bytes(row[2]), created_at=row[3]
        )

    async def snapshots(self) -> list[Snapshot]:
        async with self.engine.connect() as conn:
            result = await conn.execute(
                sa.text(
                    "SELECT position, fold_version, state, chain_hash, created_at FROM snapshots "
                    "ORDER BY position, fold_version"
                )
            )
            return [
                Snapshot(position=p, fold_version=v, state=bytes(st), chain_hash=bytes(h), created_at=at)
                for p, v, st, h, at in result
            ]

    # -- consumer checkpoints ------------------------------------------------------------

    @staticmethod
    async def _write_checkpoint(conn: AsyncConnection, checkpoint: Checkpoint | None) -> None:
        if checkpoint is not None:
            await conn.execute(_CHECKPOINT_SQL, {"c": checkpoint.consumer, "s": checkpoint.sequence})

    async def save_checkpoint(self, checkpoint: Checkpoint) -> None:
        """Store ``checkpoint`` on its own (e.g. after skipping a message that is not an event)."""
        async with self.engine.begin() as conn:
            await self._check_fence(conn)
            await self._write_checkpoint(conn, checkpoint)

    async def checkpoint(self, consumer: str) -> int:
        async with self.engine.connect() as conn:
            value = await conn.scalar(
                sa.text("SELECT sequence FROM consumer_checkpoints WHERE consumer = :c"), {"c": consumer}
            )
            return int(value or 0)


_REPLAY_SQL = (
    "SELECT position, body::text, schema_version FROM events WHERE position BETWEEN %(lo)s AND %(hi)s ORDER BY position"
)
_NO_ROWS: list[tuple[int, str, int]] = []


class _Pages:
    """The pages of a replay, read on one cursor, one query in flight at a time."""

    def __init__(self, cursor: psycopg.AsyncCursor[Any], start: int, end: int | None, page: int) -> None:
        self.cursor, self.lower, self.end, self.page = cursor, start, end, page

    async def next(self) -> list[tuple[int, str, int]]:
        """The next page's rows (none once the range or the log is done)."""
        if self.end is not None and self.lower > self.end:
            return _NO_ROWS
        upper = self.lower + self.page - 1 if self.end is None else min(self.lower + self.page - 1, self.end)
        await self.cursor.execute(_REPLAY_SQL, {"lo": self.lower, "hi": upper}, prepare=True)
        rows = cast(list[tuple[int, str, int]], await self.cursor.fetchall())
        self.lower = upper + 1
        return rows if rows else _NO_ROWS

    async def ask(self) -> asyncio.Future[list[tuple[int, str, int]]]:
        """Send the next page's query now and hand back its rows to come: the caller folds the current
        page meanwhile (a fold does not yield to the event loop, so the query must be on its way first)."""
        fetch = asyncio.ensure_future(self.next())
        await asyncio.sleep(0)  # let it send the query; it then waits for the rows
        return fetch


def _recorded(row: Sequence[Any]) -> RecordedEvent:
    position, stream_id, stream_version, recorded_at, body, version = row
    return RecordedEvent(
        position=position,
        stream_id=stream_id,
        stream_version=stream_version,
        recorded_at=recorded_at,
        event=decode(body, version),
    )
