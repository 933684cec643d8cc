"""A login role that owns one database and is no superuser: what the services connect as."""

from __future__ import annotations

import psycopg
from psycopg import sql
from sqlalchemy.engine import make_url

from nrt.adapters.infra import pgurl


def ensure_owner_role(admin_url: str, database: str, role: str, password: str, *, connect_timeout: int = 10) -> str:
    """Make ``role`` (LOGIN, no superuser, no CREATEDB/CREATEROLE) with ``password``, and ``database``
    owned by it, with everything already in its ``public`` schema; return the role's URL of it.

    ``admin_url`` is a superuser's (SQLAlchemy or libpq form); the URL returned has the same form.
    Idempotent: the role's password is set again, a database made by someone else is handed over.
    """
    ident = sql.Identifier(role)
    with psycopg.connect(pgurl.to_libpq(admin_url), autocommit=True, connect_timeout=connect_timeout) as conn:
        if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone() is None:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(ident))
        conn.execute(
            sql.SQL("ALTER ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION PASSWORD {}").format(
                ident, sql.Literal(password)
            )
        )
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,)).fetchone() is None:
            conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(database), ident))
        else:
            conn.execute(sql.SQL("ALTER DATABASE {} OWNER TO {}").format(sql.Identifier(database), ident))
    with psycopg.connect(
        pgurl.to_libpq(pgurl.with_database(admin_url, database)), autocommit=True, connect_timeout=connect_timeout
    ) as conn:
        _hand_over_public(conn, role)
    url = make_url(pgurl.with_database(admin_url, database)).set(username=role, password=password)
    return url.render_as_string(hide_password=False)


def _hand_over_public(conn: psycopg.Connection[tuple[object, ...]], role: str) -> None:
    """Tables, sequences and views in ``public`` that a database made before ``role`` existed holds
    (e.g. by the superuser) become ``role``'s, so that it can migrate them."""
    rows = conn.execute(
        """
        SELECT c.relkind, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
          AND pg_get_userbyid(c.relowner) <> %s
          AND NOT (c.relkind = 'S' AND EXISTS (
              SELECT 1 FROM pg_depend d WHERE d.objid = c.oid AND d.deptype IN ('a', 'i')))
        """,
        (role,),
    ).fetchall()
    kinds = {"r": "TABLE", "p": "TABLE", "v": "VIEW", "m": "MATERIALIZED VIEW", "S": "SEQUENCE"}
    for kind, name in rows:
        conn.execute(
            sql.SQL("ALTER {} public.{} OWNER TO {}").format(
                sql.SQL(kinds[str(kind)]), sql.Identifier(str(name)), sql.Identifier(role)
            )
        )
    conn.execute(sql.SQL("ALTER SCHEMA public OWNER TO {}").format(sql.Identifier(role)))
