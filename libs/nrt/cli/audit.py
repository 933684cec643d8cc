"""Audit commands over the PostgreSQL event log: ``nrt replay``, ``nrt audit verify``, ``nrt events``.

The database is ``--database-url``, else NRT_DATABASE_URL, else the local stack that
``nrt up`` runs. ``nrt replay`` folds the log with the same pure ``fold`` that
cluster_state runs live, so its state at the head is the live state.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, BinaryIO, TypeVar

import click
import msgspec
from rich.console import Console
from rich.table import Table

from nrt.cli.settings import cli_settings
from nrt.state import ClusterState, snapshot
from nrt.store import ChainReport, EventLog, EventStore, RecordedEvent
from nrt.store.export import export_line, verify_lines
from nrt.units import format_size, parse_duration

T = TypeVar("T")

_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}")
_HIDDEN_FIELDS = ("event_id", "occurred_at", "type")
_LONG_TEXT = 60


# -- shared plumbing ---------------------------------------------------------------------


def resolve_database_url(option: str | None) -> str:
    url = option or cli_settings().database_url
    if url:
        return url
    from nrt.stack import endpoints

    found = endpoints.discover()
    if found is not None:
        return found.database_url
    raise click.ClickException(
        "no database: pass --database-url, set NRT_DATABASE_URL, or start a local stack with `nrt up`"
    )


def _run(factory: Callable[[EventStore], Coroutine[Any, Any, T]], url: str) -> T:
    async def go() -> T:
        store = EventStore.connect(url, pool_size=2)
        try:
            return await factory(store)
        finally:
            await store.close()

    try:
        return asyncio.run(go())
    except OSError as exc:
        raise click.ClickException(f"cannot reach the database: {exc}") from None


def _console() -> Console:
    return Console(file=sys.stdout, width=int(os.environ.get("COLUMNS", "0")) or 120, highlight=False)


def parse_moment(text: str, now: datetime | None = None) -> datetime:
    """An ISO 8601 time (UTC when no offset is given) or a duration ago such as ``90s``, ``10m``, ``2h``."""
    value = text.strip()
    if _ISO_DATE.match(value):
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise click.BadParameter(f"{text!r} is not an ISO 8601 time such as 2026-05-01T12:00:00Z") from None
        return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    try:
        ago = parse_duration(value.removesuffix("ago").strip())
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is neither an ISO 8601 time (2026-05-01T12:00:00Z) nor a duration ago (30s, 10m, 2h)"
        ) from None
    return (now or datetime.now(UTC)) - timedelta(seconds=ago)


def _moment_option(_ctx: click.Context, _param: click.Parameter, value: str | None) -> datetime | None:
    return parse_moment(value) if value is not None else None


database_option = click.option(
    "--database-url",
    default=None,
    help="PostgreSQL URL (NRT_DATABASE_URL; default: the local `nrt up` stack)",
)


# -- nrt replay ----------------------------------------------------------------------------


class Replay(msgspec.Struct, frozen=True, kw_only=True):
    """The state the log folds to at ``position`` (``--json`` prints this)."""

    position: int
    until: str | None
    state: ClusterState


async def replay_log(store: EventLog, until: str | None) -> Replay:
    """Fold the log up to ``until`` (a position, a time, or the head): from the latest snapshot at or
    before it, then the events after the snapshot."""
    end: int | None = None
    if until is not None:
        end = int(until) if until.strip().isdigit() else await store.position_at(parse_moment(until))
    state, position = ClusterState(), 0
    if end != 0:
        position, state = await snapshot.fold_log(store, end)
    return Replay(position=position, until=until, state=state)


def _ago(moment: datetime | None, now: datetime) -> str:
    if moment is None:
        return "-"
    seconds = (now - moment).total_seconds()
    if seconds < 120:
        return f"{seconds:.0f}s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m ago"
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def render_replay(result: Replay, console: Console, max_sessions: int = 20) -> None:
    state = result.state
    now = state.last_event_at or datetime.now(UTC)
    at = f"up to position {result.position}" + (f" (--until {result.until})" if result.until else " (the head)")
    console.print(f"[bold]replayed {state.events_applied:,} events[/bold] {at}")
    if state.last_event_at is not None:
        console.print(f"last event at  {state.last_event_at.isoformat()}")
    digest = (state.manifest_digest or "")[:12]
    console.print(
        f"cluster        {state.cluster or '-'}   manifest v{state.manifest_version}"
        + (f" ({digest})" if digest else "")
        + (f"   [yellow]draining to v{state.drain_to_version}[/yellow]" if state.draining else "")
    )

    workers = Table(title="workers", title_justify="left")
    for column in ("worker", "host", "alive", "cpus", "ram", "accelerator", "joined"):
        workers.add_column(column)
    for w in sorted(state.workers.values(), key=lambda w: w.worker_id):
        workers.add_row(
            w.worker_id,
            w.host,
            "yes" if w.alive else "[red]lost[/red]",
            str(w.cpu_count),
            format_size(w.ram_bytes),
            f"{format_size(w.accelerator_bytes)} {w.device.name if w.device is not None else ''}".strip()
            if w.accelerator_bytes
            else "-",
            _ago(w.joined_at, now),
        )
    console.print(workers)

    models = Table(title="models", title_justify="left")
    for column in (
        "model",
        "tiers",
        "bytes",
        "requests",
        "promoted",
        "demoted",
        "cold starts",
        "last used",
        "artifact",
    ):
        models.add_column(column)
    for m in sorted(state.models.values(), key=lambda m: m.model_id):
        tiers = ", ".join(f"{p.tier}@{w}" for w, p in sorted(m.placements.items())) or "unloaded"
        held = sum(p.bytes_held for p in m.placements.values())
        models.add_row(
            m.model_id,
            tiers,
            format_size(held) if held else "-",
            str(m.requests),
            str(m.promotions),
            str(m.demotions),
            str(m.cold_starts),
            _ago(m.last_used_at, now),
            m.artifact,
        )
    console.print(models)

    with_kv = sum(1 for s in state.sessions.values() if not s.kv_evicted)
    sessions = Table(
        title=f"sessions: {len(state.sessions)} ({with_kv} holding KV)"
        + (f", the {max_sessions} most recent" if len(state.sessions) > max_sessions else ""),
        title_justify="left",
    )
    for column in ("session", "model", "worker", "turns", "cached tokens", "kv", "last used"):
        sessions.add_column(column)
    recent = sorted(state.sessions.values(), key=lambda s: s.last_used_at, reverse=True)[:max_sessions]
    for s in recent:
        sessions.add_row(
            s.session_id,
            s.model_id,
            s.worker_id,
            str(s.turns),
            str(s.cached_tokens),
            "evicted" if s.kv_evicted else format_size(s.kv_bytes),
            _ago(s.last_used_at, now),
        )
    console.print(sessions)

    in_flight: dict[int, int] = {}
    for version in state.in_flight.values():
        in_flight[version] = in_flight.get(version, 0) + 1
    console.print(
        "in flight      "
        + (", ".join(f"{n} under v{v}" for v, n in sorted(in_flight.items())) if in_flight else "none")
    )
    if state.intents:
        console.print("intents        " + ", ".join(f"{k} {v}" for k, v in sorted(state.intents.items())))
    counters = Table(title="counters", title_justify="left", show_header=False)
    counters.add_column("counter")
    counters.add_column("value", justify="right")
    for name in state.counters.__struct_fields__:
        counters.add_row(name.replace("_", " "), f"{getattr(state.counters, name):,}")
    console.print(counters)


@click.command()
@click.option("--until", metavar="POSITION|TIME", help="stop at this log position, or at this time (ISO 8601 or 10m)")
@click.option(
    "--what-if",
    "candidate",
    type=click.Path(dir_okay=False),
    help="run the recorded requests through this candidate manifest instead (exit 2 when a constraint breaks)",
)
@click.option(
    "--since", callback=_moment_option, help="--what-if: requests from this time (ISO 8601, or a duration ago: 1h)"
)
@click.option("--json", "as_json", is_flag=True, help="print the state (or the what-if report) as JSON")
@database_option
def replay(
    until: str | None, candidate: str | None, since: datetime | None, as_json: bool, database_url: str | None
) -> None:
    """Fold the event log into the cluster state as it was at a point (default: now).

    With --what-if, run the recorded requests (audit: {record_prompts: true}) through a candidate
    manifest's router, budgets and policies, offline, and report what would change."""
    if candidate is not None:
        if until is not None:
            raise click.UsageError("--until is for the folded state; --what-if takes --since")
        from nrt.cli.whatif import run_what_if

        run_what_if(candidate, since, as_json, resolve_database_url(database_url), _console())
        return
    if since is not None:
        raise click.UsageError("--since is for --what-if; the folded state takes --until")
    if until is not None and not until.strip().isdigit():
        parse_moment(until)  # a clear error before connecting
    result = _run(lambda store: replay_log(store, until), resolve_database_url(database_url))
    if as_json:
        click.echo(msgspec.json.encode(result).decode())
    else:
        render_replay(result, _console())


# -- nrt audit verify --------------------------------------------------------------------------


@click.group()
def audit() -> None:
    """Check the event log."""


class AuditReport(msgspec.Struct, frozen=True, kw_only=True):
    """``nrt audit verify``: the hash chain, and each snapshot against a fold of the log (``--json``)."""

    chain: ChainReport
    snapshots: snapshot.SnapshotReport | None  # None for an export (it holds no snapshots)

    @property
    def ok(self) -> bool:
        return self.chain.ok and (self.snapshots is None or self.snapshots.ok)

    def render(self) -> str:
        """The chain's line, then the snapshots' line when the log has any."""
        lines = [self.chain.render()]
        if self.snapshots is not None and (self.snapshots.checked or self.snapshots.skipped or not self.snapshots.ok):
            lines.append(self.snapshots.render())
        return "\n".join(lines)

    def as_json(self) -> str:
        """The chain report's fields, with the snapshots' report under ``snapshots``."""
        fields = msgspec.to_builtins(self.chain)
        fields["ok"] = self.ok
        fields["snapshots"] = msgspec.to_builtins(self.snapshots)
        return msgspec.json.encode(fields).decode()


async def audit_log(store: EventLog) -> AuditReport:
    """The whole chain, then (if it holds) every snapshot against a fold of the log up to its position."""
    chain = await store.verify()
    return AuditReport(chain=chain, snapshots=await snapshot.verify_snapshots(store) if chain.ok else None)


def audit_export(path: str) -> AuditReport:
    """Check an export (``nrt events export``) offline: its lines' hash chain."""
    try:
        with open(path, "rb") as lines:
            return AuditReport(chain=verify_lines(lines), snapshots=None)
    except OSError as exc:
        raise click.ClickException(f"cannot read the export {path}: {exc.strerror}") from None


@audit.command()
@click.argument("export", required=False, metavar="[FILE]")
@click.option("--json", "as_json", is_flag=True, help="print the report as JSON")
@database_option
def verify(export: str | None, as_json: bool, database_url: str | None) -> None:
    """Recompute the hash chain and check each snapshot against the log; with FILE, check an export
    (``nrt events export``) offline instead. Names the first broken row and exits 1 if there is one."""
    report = audit_export(export) if export is not None else _run(audit_log, resolve_database_url(database_url))
    click.echo(report.as_json() if as_json else report.render())
    if not report.ok:
        sys.exit(1)


# -- nrt events -----------------------------------------------------------------------------------


class Filters(msgspec.Struct, frozen=True, kw_only=True):
    stream_id: str | None = None
    stream_prefix: str | None = None
    types: tuple[str, ...] = ()
    since: datetime | None = None
    until: datetime | None = None


def stream_filter(stream: str | None) -> tuple[str | None, str | None]:
    """``model:legal`` is one stream; ``model:*`` (or ``model:``) every stream with that prefix."""
    if stream is None:
        return None, None
    if stream.endswith("*"):
        return None, stream[:-1]
    if stream.endswith(":"):
        return None, stream
    return stream, None


def _short(value: object) -> object:
    if isinstance(value, str) and len(value) > _LONG_TEXT:
        return value[: _LONG_TEXT - 1] + "…"
    return value


def event_line(record: RecordedEvent) -> str:
    event = record.event
    fields = {name: _short(getattr(event, name)) for name in event.__struct_fields__ if name not in _HIDDEN_FIELDS}
    body = msgspec.json.encode(fields).decode()
    return (
        f"{record.position:>8}  {event.occurred_at.isoformat(timespec='milliseconds')}  "
        f"{record.stream_id}@{record.stream_version}  {event.type}  {body}"
    )


def event_json(record: RecordedEvent) -> str:
    return msgspec.json.encode(
        {
            "position": record.position,
            "stream_id": record.stream_id,
            "stream_version": record.stream_version,
            "recorded_at": record.recorded_at,
            "event": record.event,
        }
    ).decode()


async def query_log(store: EventLog, filters: Filters, after: int, limit: int) -> list[RecordedEvent]:
    return await store.query(
        stream_id=filters.stream_id,
        stream_prefix=filters.stream_prefix,
        types=filters.types,
        since=filters.since,
        until=filters.until,
        after_position=after,
        limit=limit,
    )


async def last_matching(store: EventLog, filters: Filters, head: int, n: int) -> list[RecordedEvent]:
    """The last ``n`` events at or before ``head`` that match, looking back in a doubling window."""
    window = max(4 * n, 100)
    while True:
        start = max(0, head - window)
        found = [r for r in await query_log(store, filters, start, window) if r.position <= head]
        if len(found) >= n or start == 0:
            return found[-n:]
        window *= 2


async def follow_log(
    store: EventLog, filters: Filters, last: int, interval: float, stop_after: int | None, page: int = 1_000
) -> AsyncIterator[RecordedEvent]:
    """The last ``last`` matching events, then every new one as it is recorded."""
    cursor = await store.head()
    batch = await last_matching(store, filters, cursor, last) if last else []
    emitted = 0
    while True:
        for record in batch:
            yield record
            emitted += 1
            if stop_after is not None and emitted >= stop_after:
                return
        head = await store.head()
        if head <= cursor:
            batch = []
            await asyncio.sleep(interval)
            continue
        batch = await query_log(store, filters, cursor, page)
        # positions become visible in order, so a short page holds every match up to ``head``
        cursor = batch[-1].position if len(batch) == page else max(head, batch[-1].position if batch else head)


@click.group()
def events() -> None:
    """List and follow the recorded events."""


def _filters(stream: str | None, types: Sequence[str], since: datetime | None, until: datetime | None) -> Filters:
    stream_id, prefix = stream_filter(stream)
    return Filters(stream_id=stream_id, stream_prefix=prefix, types=tuple(types), since=since, until=until)


_stream_option = click.option("--stream", help="a stream id (model:legal) or a prefix ending in * (model:*)")
_type_option = click.option("--type", "types", multiple=True, help="an event type, e.g. TierChanged (repeatable)")


@events.command()
@_stream_option
@_type_option
@click.option("--since", callback=_moment_option, help="from this time (ISO 8601, or a duration ago: 10m)")
@click.option("--until", callback=_moment_option, help="up to this time (ISO 8601, or a duration ago)")
@click.option("--after", type=int, default=0, show_default=True, help="only positions after this one (paging)")
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="one JSON object per line")
@database_option
def query(
    stream: str | None,
    types: tuple[str, ...],
    since: datetime | None,
    until: datetime | None,
    after: int,
    limit: int,
    as_json: bool,
    database_url: str | None,
) -> None:
    """List recorded events by stream, type and time, in log order."""
    filters = _filters(stream, types, since, until)
    records = _run(lambda store: query_log(store, filters, after, limit), resolve_database_url(database_url))
    for record in records:
        click.echo(event_json(record) if as_json else event_line(record))
    if not as_json:
        click.echo(
            f"{len(records)} event(s)"
            + (f"; more after position {records[-1].position}" if len(records) == limit else ""),
            err=True,
        )


async def _export_range(store: EventLog, since: str | None, until: str | None) -> tuple[int, int | None]:
    """Positions ``(start, end)`` for ``--since`` / ``--until``: each a position or a time."""

    async def position(text: str) -> int:
        return int(text) if text.strip().isdigit() else await store.position_at(parse_moment(text))

    start = 1
    if since is not None:
        start = int(since) if since.strip().isdigit() else await position(since) + 1
    return start, await position(until) if until is not None else None


async def export_log(store: EventLog, out: BinaryIO, since: str | None, until: str | None) -> int:
    """Write the rows in range to ``out`` as JSON Lines; the number written."""
    start, end = await _export_range(store, since, until)
    written = 0
    async for row in store.chain_rows(start, end):
        out.write(export_line(row))
        written += 1
    return written


@events.command()
@click.argument("file", metavar="FILE")
@click.option("--since", metavar="POSITION|TIME", help="from this position, or after this time (ISO 8601 or 10m)")
@click.option("--until", metavar="POSITION|TIME", help="up to this position, or this time")
@database_option
def export(file: str, since: str | None, until: str | None, database_url: str | None) -> None:
    """Write the log (or a range of it) to FILE as JSON Lines with each row's hashes (`nrt audit verify FILE`)."""
    for value in (since, until):
        if value is not None and not value.strip().isdigit():
            parse_moment(value)  # a clear error before connecting
    url = resolve_database_url(database_url)
    try:
        out = open(file, "wb")  # noqa: SIM115  # closed below; opened first so a bad path fails before connecting
    except OSError as exc:
        raise click.ClickException(f"cannot write {file}: {exc.strerror}") from None
    with out:
        written = _run(lambda store: export_log(store, out, since, until), url)
    click.echo(f"exported {written} event(s) to {file}", err=True)


@events.command()
@_stream_option
@_type_option
@click.option("-n", "--last", type=click.IntRange(min=0), default=10, show_default=True, help="show this many first")
@click.option("--interval", type=float, default=0.5, show_default=True, help="seconds between polls")
@click.option("--count", type=click.IntRange(min=1), default=None, help="stop after this many events")
@click.option("--json", "as_json", is_flag=True, help="one JSON object per line")
@database_option
def tail(
    stream: str | None,
    types: tuple[str, ...],
    last: int,
    interval: float,
    count: int | None,
    as_json: bool,
    database_url: str | None,
) -> None:
    """Follow the log: the last few events, then each new one as cluster_state records it (Ctrl-C stops)."""
    filters = _filters(stream, types, None, None)

    async def go(store: EventStore) -> None:
        async for record in follow_log(store, filters, last, interval, count):
            click.echo(event_json(record) if as_json else event_line(record))
            sys.stdout.flush()

    with contextlib.suppress(KeyboardInterrupt):
        _run(go, resolve_database_url(database_url))
