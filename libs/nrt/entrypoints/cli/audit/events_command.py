"""``nrt events query|export|tail``: list, export and follow the recorded events."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import BinaryIO

import click
import msgspec

from nrt.adapters.store import EventStore
from nrt.core.eventlog import EventLog, RecordedEvent
from nrt.core.eventlog.export import export_line
from nrt.entrypoints.cli.audit.moments import moment_option, parse_moment
from nrt.entrypoints.cli.audit.render import event_json, event_line
from nrt.entrypoints.cli.event_log import database_option, resolve_database_url, run_on_log


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
@click.option("--since", callback=moment_option, help="from this time (ISO 8601, or a duration ago: 10m)")
@click.option("--until", callback=moment_option, help="up to this time (ISO 8601, or a duration ago)")
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
    records = run_on_log(lambda store: query_log(store, filters, after, limit), resolve_database_url(database_url))
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
        written = run_on_log(lambda store: export_log(store, out, since, until), url)
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
        run_on_log(go, resolve_database_url(database_url))
