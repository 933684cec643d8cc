"""Reaching the PostgreSQL event log from a command: which database, and running a query on it.

The database is ``--database-url``, else NRT_DATABASE_URL, else the local stack that
``nrt up`` runs. Used by ``nrt replay`` (and its ``--what-if``), ``nrt audit`` and ``nrt events``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import click

from nrt.adapters.store import EventStore
from nrt.entrypoints.cli.settings import cli_settings

T = TypeVar("T")

database_option = click.option(
    "--database-url",
    default=None,
    help="PostgreSQL URL (NRT_DATABASE_URL; default: the local `nrt up` stack)",
)


def resolve_database_url(option: str | None) -> str:
    url = option or cli_settings().database_url
    if url:
        return url
    from nrt.entrypoints.stack import endpoints

    found = endpoints.discover()
    if found is not None:
        return found.database_url
    raise click.ClickException(
        "no database: pass --database-url, set NRT_DATABASE_URL, or start a local stack with `nrt up`"
    )


def run_on_log(factory: Callable[[EventStore], Coroutine[Any, Any, T]], url: str) -> T:
    """Run ``factory(store)`` on a connection to the log at ``url``; an unreachable database is a clear error."""

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
