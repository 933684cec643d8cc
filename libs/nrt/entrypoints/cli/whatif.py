"""``nrt replay --what-if candidate.yaml``: the recorded requests through a candidate manifest, offline.

The report (``nrt.core.whatif``): routing changes, requests the candidate sends to its fallback,
whether its tiers fit its budgets, and the tier transitions and cold starts it would cause over
the recorded traffic. Exit status 2 when a constraint would break (``--json`` for CI).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import click
import msgspec
from rich.console import Console
from rich.table import Table

from nrt.adapters.bus.errors import RemoteError
from nrt.core.manifest import ManifestError
from nrt.core.whatif import WhatIfReport
from nrt.core.whatif.candidate import read_recorded
from nrt.entrypoints.cli.event_log import run_on_log
from nrt.hosting.whatif_run import parse_candidate, what_if

BROKEN = 2  # the exit status when a constraint would break


def run_what_if(path: str, since: datetime | None, as_json: bool, url: str, console: Console) -> None:
    file = Path(path)
    try:
        candidate = parse_candidate(file.read_text(encoding="utf-8"), str(file))
    except OSError as exc:
        raise click.ClickException(f"cannot read {file}: {exc.strerror}") from None
    except ManifestError as exc:
        raise click.ClickException(str(exc)) from None
    recorded = run_on_log(lambda store: read_recorded(store, since), url)
    try:
        report = what_if(recorded, candidate)
    except (RemoteError, ValueError) as exc:
        raise click.ClickException(f"cannot run the candidate's router offline: {exc}") from None
    if as_json:
        click.echo(msgspec.json.encode(report).decode())
    else:
        render_what_if(report, console)
    if not report.ok:
        raise SystemExit(BROKEN)


def render_what_if(report: WhatIfReport, console: Console) -> None:
    console.print(
        f"[bold]what-if[/bold] {report.cluster} ({report.candidate_digest[:12]}) against manifest "
        f"v{report.current_version}: {report.requests} recorded request(s), {report.reclassified} classified "
        f"again by the candidate's router, {report.unchanged} routed as before"
    )
    if report.constrained:
        kinds = ", ".join(f"{count} {kind}" for kind, count in report.constrained.items())
        console.print(f"constrained answers among them (they keep their constraint on the new route): {kinds}")
    if report.requests == 0:
        console.print(
            "[yellow]no recorded request texts: set audit: {record_prompts: true} in the manifest in force[/yellow]"
        )
    if report.changes:
        changes = Table(title="routing changes (intent (model) before -> after)", title_justify="left")
        for column in ("before", "after", "requests", "examples"):
            changes.add_column(column)
        for change in report.changes:
            changes.add_row(
                change.before.describe(), change.after.describe(), str(change.count), " | ".join(change.examples)
            )
        console.print(changes)
    else:
        console.print("routing changes: none")
    console.print(
        f"to the fallback: {report.to_fallback}"
        + (f" (e.g. {report.fallback_examples[0]!r})" if report.fallback_examples else "")
    )
    for use in report.budgets:
        mark = "[green]fits[/green]" if use.fits else "[red]over budget[/red]"
        console.print(f"{mark}  {use.describe()}")
    if report.transitions:
        tiers = Table(title=f"tier transitions ({report.cold_starts} cold start(s))", title_justify="left")
        for column in ("when", "model", "from", "to", "reason"):
            tiers.add_column(column)
        for t in report.transitions:
            when = "at apply" if t.at is None else t.at.isoformat(timespec="seconds")
            tiers.add_row(
                when,
                t.model_id,
                t.from_tier.value,
                t.to_tier.value,
                str(t.reason) + (" (cold start)" if t.cold_start else ""),
            )
        console.print(tiers)
    else:
        console.print("tier transitions: none")
    for violation in report.violations:
        console.print(f"[red]BREAKS[/red] {violation.code}: {violation.message}")
    console.print(
        "[green]ok[/green]: no constraint breaks"
        if report.ok
        else f"[red]{len(report.violations)} constraint(s) would break[/red]"
    )
