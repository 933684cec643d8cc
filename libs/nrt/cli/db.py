"""``nrt db``: database maintenance."""

from __future__ import annotations

import click

from nrt.settings import Settings
from nrt.store import upgrade


@click.group()
def db() -> None:
    """The event store's database."""


@db.command()
@click.option("--database-url", envvar="NRT_DATABASE_URL", required=True, help="PostgreSQL URL (NRT_DATABASE_URL)")
def migrate(database_url: str) -> None:
    """Apply every migration (idempotent)."""
    upgrade(database_url or Settings.from_env().database_url or "")
    click.echo("database is at the latest migration")
