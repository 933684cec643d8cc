"""The stores the contract runs on, each with a way to tamper with its rows behind its back."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import msgspec
import psycopg

from nrt.adapters.infra.pgurl import to_libpq
from nrt.adapters.store import EventStore, InMemoryEventStore
from nrt.adapters.store.memory import StoredRow
from nrt.core.eventlog import EventLog


@dataclass(frozen=True)
class Backend:
    """A store and what someone with access to its storage could do behind its back."""

    log: EventLog
    edit_field: Callable[[int, str, str], None]  # (position, field, value): rewrite one field of a row's body
    delete_row: Callable[[int], None]  # (position)
    edit_snapshot: Callable[[int, int, bytes], None]  # (position, fold version, state): rewrite a snapshot's state


def _tamper(database_url: str, sql: str, *params: object) -> None:
    """What a superuser could do behind the store's back: bypass the append-only trigger."""
    with psycopg.connect(to_libpq(database_url), autocommit=True) as conn:
        conn.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
        conn.execute(sql, params)
        conn.execute("ALTER TABLE events ENABLE TRIGGER events_append_only")


def postgres(database_url: str) -> tuple[EventStore, Backend]:
    store = EventStore.connect(database_url)

    def edit_field(position: int, field: str, value: str) -> None:
        _tamper(
            database_url,
            "UPDATE events SET body = jsonb_set(body::jsonb, %s, %s)::json WHERE position = %s",
            [field],
            json.dumps(value),
            position,
        )

    def delete_row(position: int) -> None:
        _tamper(database_url, "DELETE FROM events WHERE position = %s", position)

    def edit_snapshot(position: int, fold_version: int, state: bytes) -> None:
        with psycopg.connect(to_libpq(database_url), autocommit=True) as conn:
            conn.execute(
                "UPDATE snapshots SET state = %s WHERE position = %s AND fold_version = %s",
                (state, position, fold_version),
            )

    return store, Backend(store, edit_field, delete_row, edit_snapshot)


def memory() -> Backend:
    store = InMemoryEventStore()

    def edit_field(position: int, field: str, value: str) -> None:
        def edit(row: StoredRow) -> StoredRow:
            body = json.loads(row.body)
            body[field] = value
            return msgspec.structs.replace(row, body=json.dumps(body, sort_keys=True).encode())

        store.tamper_with_row(position, edit)

    return Backend(
        store,
        edit_field,
        lambda position: store.tamper_with_row(position, lambda _: None),
        store.tamper_with_snapshot,
    )
