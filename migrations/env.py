"""Alembic environment: runs migrations over a synchronous psycopg connection."""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import create_engine, pool, text

from nrt.adapters.infra.pgurl import to_sqlalchemy
from nrt.adapters.store.tables import metadata

# Several processes may migrate one database at once (each host's `nrt up` given the cluster's database):
# the first to take this lock migrates, the others wait for it and then find nothing left to do.
MIGRATION_LOCK_KEY = 0x4E52_544D  # "NRTM"

config = context.config
url = config.get_main_option("sqlalchemy.url") or os.environ.get("NRT_DATABASE_URL")
if not url:
    raise SystemExit("no database URL: set NRT_DATABASE_URL or pass one to nrt.adapters.store.migrate.upgrade()")


def run() -> None:
    if context.is_offline_mode():
        context.configure(url=to_sqlalchemy(url), target_metadata=metadata, literal_binds=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_engine(to_sqlalchemy(url), poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=metadata)
        with context.begin_transaction():
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
            context.run_migrations()
    engine.dispose()


run()
