"""``nrt db``: database maintenance."""

from __future__ import annotations

import click

from nrt.adapters.store import upgrade
from nrt.entrypoints.cli.settings import cli_settings


@click.group()
def db() -> None:
    """The event store's database."""


@db.command()
@click.option("--database-url", default=None, help="PostgreSQL URL (default: NRT_DATABASE_URL)")
def migrate(database_url: str | None) -> None:
    """Apply every migration (idempotent)."""
    url = database_url or cli_settings().database_url
    if not url:
        raise click.UsageError("no database: pass --database-url or set NRT_DATABASE_URL")
    upgrade(url)
    click.echo("database is at the latest migration")
