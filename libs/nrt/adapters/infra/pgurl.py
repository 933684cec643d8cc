"""PostgreSQL URL helpers: SQLAlchemy (``postgresql+psycopg://``) and libpq (``postgresql://``) forms."""

from __future__ import annotations

import contextlib

import psycopg
from psycopg import errors, sql
from sqlalchemy.engine import URL, make_url

SQLALCHEMY_DRIVER = "postgresql+psycopg"
LIBPQ_SCHEME = "postgresql"


def _parse(url: str) -> URL:
    parsed = make_url(url)
    if parsed.get_backend_name() != "postgresql":
        raise ValueError(f"not a PostgreSQL URL: {parsed.render_as_string(hide_password=True)}")
    return parsed


def to_sqlalchemy(url: str) -> str:
    """The same server and database as a SQLAlchemy URL using the psycopg 3 driver."""
    return _parse(url).set(drivername=SQLALCHEMY_DRIVER).render_as_string(hide_password=False)


def to_libpq(url: str) -> str:
    """The same server and database as a libpq URI (what ``psycopg.connect`` and ``psql`` take)."""
    return _parse(url).set(drivername=LIBPQ_SCHEME).render_as_string(hide_password=False)


def with_database(url: str, database: str) -> str:
    """``url`` pointing at ``database`` instead, keeping its form (SQLAlchemy or libpq)."""
    return _parse(url).set(database=database).render_as_string(hide_password=False)


def ensure_database(url: str, name: str, *, connect_timeout: int = 10) -> str:
    """Create database ``name`` on the server ``url`` points at unless it exists.

    Connects to the database named in ``url`` (normally ``postgres``) to do so.
    Safe against a concurrent creator. Returns ``url`` pointing at ``name``.
    """
    with psycopg.connect(to_libpq(url), autocommit=True, connect_timeout=connect_timeout) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if exists is None:
            # a concurrent creator may win the race: that is fine
            with contextlib.suppress(errors.DuplicateDatabase, errors.UniqueViolation):
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return with_database(url, name)
