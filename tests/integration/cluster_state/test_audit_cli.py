"""nrt replay, nrt audit verify and nrt events on a real PostgreSQL log."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from datetime import timedelta

import msgspec
import psycopg

from nrt.adapters.infra.pgurl import to_libpq
from nrt.adapters.store import EventStore
from nrt.core.events import Event
from nrt.core.state import ClusterState, fold
from nrt.testing.cli import nrt_cli as _nrt
from nrt.testing.traffic import START, traffic


def _append(url: str, events: list[Event]) -> None:
    async def go() -> None:
        store = EventStore.connect(url)
        try:
            for i in range(0, len(events), 500):
                await store.append(events[i : i + 500])
        finally:
            await store.close()

    asyncio.run(go())


def test_replay_folds_the_log_up_to_a_position_or_a_time(database_url: str) -> None:
    events = list(traffic(2_000, seed=21))
    _append(database_url, events)
    code, out, _ = _nrt("replay", "--json", "--database-url", database_url)
    assert code == 0
    whole = msgspec.json.decode(out)
    assert whole["position"] == 2_000
    assert msgspec.convert(whole["state"], ClusterState) == fold(events)
    code, out, _ = _nrt("replay", "--json", "--until", "500", "--database-url", database_url)
    assert msgspec.convert(msgspec.json.decode(out)["state"], ClusterState) == fold(events[:500])
    moment = events[999].occurred_at
    code, out, _ = _nrt("replay", "--json", "--until", moment.isoformat(), "--database-url", database_url)
    at_time = msgspec.json.decode(out)
    assert at_time["position"] == 1_000
    assert msgspec.convert(at_time["state"], ClusterState) == fold(events[:1000])


def test_replay_prints_a_readable_table(database_url: str) -> None:
    _append(database_url, list(traffic(300, seed=22)))
    code, out, _ = _nrt("replay", "--database-url", database_url)
    assert code == 0, out
    assert "replayed 300 events up to position 300 (the head)" in out
    assert "manifest v1" in out
    for heading in ("workers", "models", "sessions:", "counters", "requests completed"):
        assert heading in out
    assert "resident@w1" in out  # tiers per model
    code, _, err = _nrt("replay", "--until", "yesterday-ish", "--database-url", database_url)
    assert code == 2
    assert "neither an ISO 8601 time" in err


def test_audit_verify_passes_then_names_the_first_tampered_row(database_url: str) -> None:
    _append(database_url, list(traffic(1_200, seed=23)))
    code, out, _ = _nrt("audit", "verify", "--database-url", database_url)
    assert (code, out.strip()) == (0, "hash chain intact: 1200 events verified")
    with psycopg.connect(to_libpq(database_url), autocommit=True) as conn:
        conn.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
        conn.execute(
            "UPDATE events SET body = jsonb_set(body::jsonb, '{latency_ms}', '1.0')::json "
            "WHERE position = (SELECT min(position) FROM events WHERE type = 'RequestCompleted' AND position > 700)"
        )
        tampered = conn.execute(
            "SELECT min(position) FROM events WHERE type = 'RequestCompleted' AND position > 700"
        ).fetchone()
    assert tampered is not None
    code, out, _ = _nrt("audit", "verify", "--database-url", database_url)
    assert code == 1
    assert f"hash chain broken at position {tampered[0]}" in out
    assert "its content does not match its hash: the row was modified" in out
    code, out, _ = _nrt("audit", "verify", "--json", "--database-url", database_url)
    assert json.loads(out)["first_bad_position"] == tampered[0]


def test_events_query_by_stream_type_and_time(database_url: str) -> None:
    events = list(traffic(1_000, seed=24))
    _append(database_url, events)
    code, out, err = _nrt(
        "events", "query", "--stream", "model:*", "--type", "TierChanged", "--database-url", database_url
    )
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 4  # the four placements of the traffic's setup
    assert all(" TierChanged " in line and "model:" in line for line in lines)
    assert '"to_tier":"resident"' in lines[0]
    assert "4 event(s)" in err
    code, out, _ = _nrt("events", "query", "--stream", "worker:w1", "--json", "--database-url", database_url)
    [joined] = [json.loads(line) for line in out.splitlines()]
    assert joined["event"]["type"] == "WorkerJoined"
    assert (joined["position"], joined["stream_version"]) == (2, 1)
    since = (events[100].occurred_at).isoformat()
    until = (events[199].occurred_at).isoformat()
    code, out, _ = _nrt(
        "events",
        "query",
        "--since",
        since,
        "--until",
        until,
        "--limit",
        "1000",
        "--json",
        "--database-url",
        database_url,
    )
    positions = [json.loads(line)["position"] for line in out.splitlines()]
    assert positions == list(range(101, 201))
    code, out, err = _nrt("events", "query", "--limit", "10", "--after", "990", "--database-url", database_url)
    assert [int(line.split()[0]) for line in out.splitlines()] == list(range(991, 1001))
    assert "more after position 1000" in err
    assert START + timedelta(days=1) > events[-1].occurred_at


def test_events_tail_shows_the_last_events_then_follows_new_ones(database_url: str) -> None:
    events = list(traffic(400, seed=25))
    _append(database_url, events[:300])

    def later() -> None:
        time.sleep(1.0)
        _append(database_url, events[300:])

    writer = threading.Thread(target=later)
    writer.start()
    code, out, _ = _nrt(
        "events", "tail", "-n", "5", "--count", "105", "--interval", "0.1", "--json", "--database-url", database_url
    )
    writer.join()
    assert code == 0
    positions = [json.loads(line)["position"] for line in out.splitlines()]
    assert positions == list(range(296, 401))
    code, out, _ = _nrt(
        "events", "tail", "-n", "3", "--type", "RequestCompleted", "--count", "3", "--database-url", database_url
    )
    assert [line.split()[3] for line in out.splitlines()] == ["RequestCompleted"] * 3


def test_a_missing_database_is_a_clear_error(tmp_path: object, monkeypatch: object) -> None:
    import pytest

    assert isinstance(monkeypatch, pytest.MonkeyPatch)
    monkeypatch.delenv("NRT_DATABASE_URL", raising=False)
    monkeypatch.setenv("NRT_HOME", str(tmp_path))
    code, _, err = _nrt("audit", "verify")
    assert code == 1
    assert "no database: pass --database-url, set NRT_DATABASE_URL, or start a local stack with `nrt up`" in err
