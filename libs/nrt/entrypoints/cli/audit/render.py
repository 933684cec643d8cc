"""How the audit commands print: the replayed state as rich tables, and one event per line."""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime

import msgspec
from rich.console import Console
from rich.table import Table

from nrt.core.eventlog import RecordedEvent
from nrt.core.state import ClusterState
from nrt.core.units import format_size

_HIDDEN_FIELDS = ("event_id", "occurred_at", "type")
_LONG_TEXT = 60


def console() -> Console:
    """Standard output as a rich console, as wide as COLUMNS (120 when unset)."""
    return Console(file=sys.stdout, width=int(os.environ.get("COLUMNS", "0")) or 120, highlight=False)


def _ago(moment: datetime | None, now: datetime) -> str:
    if moment is None:
        return "-"
    seconds = (now - moment).total_seconds()
    if seconds < 120:
        return f"{seconds:.0f}s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m ago"
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def render_replay(
    state: ClusterState, position: int, until: str | None, console: Console, max_sessions: int = 20
) -> None:
    """The state folded up to ``position`` (``--until`` ``until``, or the head when None)."""
    now = state.last_event_at or datetime.now(UTC)
    at = f"up to position {position}" + (f" (--until {until})" if until else " (the head)")
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
