"""``nrt audit verify``: the log's hash chain, and each snapshot against a fold of the log."""

from __future__ import annotations

import sys

import click
import msgspec

from nrt.core.eventlog import ChainReport, EventLog
from nrt.core.eventlog.export import verify_lines
from nrt.core.state import snapshot
from nrt.entrypoints.cli.event_log import database_option, resolve_database_url, run_on_log


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
    report = audit_export(export) if export is not None else run_on_log(audit_log, resolve_database_url(database_url))
    click.echo(report.as_json() if as_json else report.render())
    if not report.ok:
        sys.exit(1)
