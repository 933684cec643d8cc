"""nrt replay from a snapshot, nrt audit verify over snapshots, nrt events export and its offline check."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import msgspec
import psycopg

from nrt.adapters.infra.pgurl import to_libpq
from nrt.adapters.store import EventStore
from nrt.core.events import Event
from nrt.core.state import fold
from nrt.core.state.snapshot import FOLD_VERSION, encode_state, save
from nrt.entrypoints.cli.audit import Replay
from nrt.testing.cli import nrt_cli as _nrt
from nrt.testing.traffic import traffic


def _log_with_snapshots(url: str, events: list[Event], at: list[int]) -> None:
    async def go() -> None:
        store = EventStore.connect(url)
        try:
            await store.append(events)
            for position in at:
                await save(store, position, fold(events[:position]))
        finally:
            await store.close()

    asyncio.run(go())


def test_replay_starts_from_a_snapshot_and_folds_to_the_same_state(database_url: str) -> None:
    events = list(traffic(600, seed=31))
    _log_with_snapshots(database_url, events, [200, 450])
    for until, n in [(None, 600), ("450", 450), ("300", 300), ("100", 100)]:
        args = ["replay", "--json", "--database-url", database_url] + (["--until", until] if until else [])
        code, out, _ = _nrt(*args)
        assert code == 0
        replayed = msgspec.json.decode(out, type=Replay)
        assert replayed.position == n
        assert replayed.state == fold(events[:n])


def test_audit_verify_checks_each_snapshot_against_the_log(database_url: str) -> None:
    events = list(traffic(500, seed=32))
    _log_with_snapshots(database_url, events, [150, 400])
    code, out, _ = _nrt("audit", "verify", "--database-url", database_url)
    assert (code, out.splitlines()) == (
        0,
        ["hash chain intact: 500 events verified", "snapshots intact: 2 match a fold of the log"],
    )
    with psycopg.connect(to_libpq(database_url), autocommit=True) as conn:
        conn.execute(
            "UPDATE snapshots SET state = %s WHERE position = 400 AND fold_version = %s",
            (encode_state(fold(events[:399])), FOLD_VERSION),
        )
    code, out, _ = _nrt("audit", "verify", "--database-url", database_url)
    assert code == 1
    assert "snapshot at position 400 is wrong: its state differs from the fold of the log" in out
    code, out, _ = _nrt("audit", "verify", "--json", "--database-url", database_url)
    report = json.loads(out)
    assert report["ok"] is False
    assert report["snapshots"]["first_bad_position"] == 400


def test_export_then_verify_offline_and_a_tampered_line_is_named(database_url: str, tmp_path: Path) -> None:
    events = list(traffic(300, seed=33))
    _log_with_snapshots(database_url, events, [])
    whole, part = tmp_path / "log.jsonl", tmp_path / "part.jsonl"
    code, _, err = _nrt("events", "export", str(whole), "--database-url", database_url)
    assert code == 0
    assert "exported 300 event(s)" in err
    lines = whole.read_text().splitlines()
    assert len(lines) == 300
    first = json.loads(lines[0])
    assert (first["position"], first["prev_hash"]) == (1, "00" * 32)
    assert len(first["hash"]) == 64
    code, out, _ = _nrt("audit", "verify", str(whole))
    assert (code, out.strip()) == (0, "hash chain intact: 300 events verified")

    code, _, _ = _nrt("events", "export", str(part), "--since", "101", "--until", "250", "--database-url", database_url)
    assert code == 0
    assert [json.loads(line)["position"] for line in part.read_text().splitlines()] == list(range(101, 251))
    code, out, _ = _nrt("audit", "verify", str(part))
    assert (code, out.strip()) == (0, "hash chain intact: 150 events verified")

    row = json.loads(lines[120])
    body = json.loads(row["body"])
    body["occurred_at"] = "2020-01-01T00:00:00Z"
    row["body"] = json.dumps(body, sort_keys=True, separators=(",", ":"))
    lines[120] = json.dumps(row)
    whole.write_text("\n".join(lines) + "\n")
    code, out, _ = _nrt("audit", "verify", str(whole))
    assert code == 1
    assert "hash chain broken at position 121" in out
    assert "its content does not match its hash" in out

    del lines[200]
    whole.write_text("\n".join(lines) + "\n")
    code, out, _ = _nrt("audit", "verify", str(whole))
    assert code == 1
    assert "hash chain broken at position 121" in out  # the first problem is still named first

    code, _, err = _nrt("audit", "verify", str(tmp_path / "missing.jsonl"))
    assert code == 1
    assert "cannot read the export" in err
