"""``nrt replay``: fold the event log into the cluster state as it was at a point (or run ``--what-if``).

It folds with the same pure ``fold`` that cluster_state runs live, so its state at the head is
the live state.
"""

from __future__ import annotations

from datetime import datetime

import click
import msgspec

from nrt.core.eventlog import EventLog
from nrt.core.state import ClusterState, snapshot
from nrt.entrypoints.cli.audit.moments import moment_option, parse_moment
from nrt.entrypoints.cli.audit.render import console, render_replay
from nrt.entrypoints.cli.event_log import database_option, resolve_database_url, run_on_log
from nrt.entrypoints.cli.whatif import run_what_if


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


@click.command()
@click.option("--until", metavar="POSITION|TIME", help="stop at this log position, or at this time (ISO 8601 or 10m)")
@click.option(
    "--what-if",
    "candidate",
    type=click.Path(dir_okay=False),
    help="run the recorded requests through this candidate manifest instead (exit 2 when a constraint breaks)",
)
@click.option(
    "--since", callback=moment_option, help="--what-if: requests from this time (ISO 8601, or a duration ago: 1h)"
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
        run_what_if(candidate, since, as_json, resolve_database_url(database_url), console())
        return
    if since is not None:
        raise click.UsageError("--since is for --what-if; the folded state takes --until")
    if until is not None and not until.strip().isdigit():
        parse_moment(until)  # a clear error before connecting
    result = run_on_log(lambda store: replay_log(store, until), resolve_database_url(database_url))
    if as_json:
        click.echo(msgspec.json.encode(result).decode())
    else:
        render_replay(result.state, result.position, result.until, console())
