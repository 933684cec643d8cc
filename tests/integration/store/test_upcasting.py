"""An event written at an older schema version is read through its upcaster, from every reader of the log.

The row below is hand-written as NRT wrote ``WorkerJoined`` version 1 (no ``role``), with
``schema_version`` 1 and a hash chained over its exact bytes: the store's reads, the fold,
``nrt replay`` and ``nrt audit verify`` all handle it, and the stored bytes stay as written.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import psycopg
import pytest
from click.testing import CliRunner

from nrt.adapters.infra.pgurl import to_libpq
from nrt.adapters.store import EventStore
from nrt.core.device import Device
from nrt.core.eventlog.hashchain import row_hash
from nrt.core.events import ManifestApplied, WorkerJoined, schema_version
from nrt.core.events import upcasters as upcasting
from nrt.core.state import fold
from nrt.core.vocabulary import DeviceKind, WorkerRole
from nrt.entrypoints.cli.audit import replay, verify

V1_ID = "0d5c2a8e-6f3b-4c1e-9a7d-000000000001"
V1_BODY = (
    f'{{"cpu_count":4,"event_id":"{V1_ID}","host":"old-host","occurred_at":"2026-01-02T03:04:05Z",'
    '"ram_bytes":1024,"type":"WorkerJoined","worker_id":"w-old"}'
)


def _store_v1_row(database_url: str) -> int:
    """Insert the version 1 row after the head, chained as the store chains rows; its position."""
    with psycopg.connect(to_libpq(database_url), autocommit=True) as conn:
        row = conn.execute("SELECT position, hash FROM events ORDER BY position DESC LIMIT 1").fetchone()
        assert row is not None
        position, prev_hash = int(row[0]) + 1, bytes(row[1])
        stream_id = "worker:w-old"
        digest = row_hash(prev_hash, position, stream_id, 1, V1_BODY.encode())
        conn.execute(
            "INSERT INTO events (position, event_id, stream_id, stream_version, type, schema_version, occurred_at, "
            "body, prev_hash, hash) VALUES (%s, %s, %s, 1, 'WorkerJoined', 1, %s, %s, %s, %s)",
            (position, V1_ID, stream_id, datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), V1_BODY, prev_hash, digest),
        )
    return position


@pytest.fixture
def upcasts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ids of the bodies that went through WorkerJoined's v1 -> v2 upcaster."""
    seen: list[str] = []
    real = upcasting.UPCASTERS[("WorkerJoined", 1)]

    def spy(body: dict[str, object]) -> dict[str, object]:
        seen.append(str(body["event_id"]))
        return real(body)

    monkeypatch.setitem(upcasting.UPCASTERS, ("WorkerJoined", 1), spy)
    return seen


async def test_a_v1_row_is_read_through_its_upcaster(
    event_store: EventStore, database_url: str, upcasts: list[str]
) -> None:
    assert schema_version("WorkerJoined") == 3  # the changed type: version 2 added the role, version 3 the device
    manifest = ManifestApplied(version=1, cluster="c", digest="d", text="t")
    await event_store.append([manifest])
    position = _store_v1_row(database_url)
    current = WorkerJoined(worker_id="w-new", host="new-host", cpu_count=2, ram_bytes=2048, role=WorkerRole.ROUTER)
    await event_store.append([current])  # the store appends after a row it did not write itself

    (stored,) = await event_store.read_stream("worker:w-old")
    assert stored.position == position
    assert stored.event == WorkerJoined(
        event_id=V1_ID,
        occurred_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        worker_id="w-old",
        host="old-host",
        cpu_count=4,
        ram_bytes=1024,
        role=WorkerRole.SPECIALIST,
        device=Device(kind=DeviceKind.CPU, id="", name="", total_bytes=1024),  # no accelerator: its CPU and RAM
    )
    assert upcasts == [V1_ID]
    assert [r.event for r in await event_store.query(types=["WorkerJoined"])] == [stored.event, current]
    replayed = [event async for _, event in event_store.replay()]
    assert replayed == [manifest, stored.event, current]
    state = fold(replayed)
    assert state.workers["w-old"].role == WorkerRole.SPECIALIST
    assert state.workers["w-new"].role == WorkerRole.ROUTER
    assert upcasts == [V1_ID] * 3  # every read upcasts; only version 1 rows do

    runner = CliRunner()
    result = await asyncio.to_thread(runner.invoke, replay, ["--json", "--database-url", database_url])
    assert result.exit_code == 0, result.output
    workers = json.loads(result.output)["state"]["workers"]
    assert (workers["w-old"]["host"], workers["w-old"]["role"]) == ("old-host", "specialist")

    # the chain covers the bytes as stored: upcasting reads them, never rewrites them
    report = await event_store.verify()
    assert report.ok, report.render()
    assert report.checked == 3
    verified = await asyncio.to_thread(runner.invoke, verify, ["--database-url", database_url])
    assert verified.exit_code == 0
    assert "intact: 3 events" in verified.output
    with psycopg.connect(to_libpq(database_url)) as conn:
        row = conn.execute("SELECT body::text, schema_version FROM events WHERE position = %s", (position,)).fetchone()
    assert row == (V1_BODY, 1)
