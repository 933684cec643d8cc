"""Snapshots in every store: saved with the chain hash of their position, found at or before a target,
ignored when their fold version or chain hash does not match, and checked by the audit.

Run, like ``store_contract``, by the memory and PostgreSQL contract files."""

from __future__ import annotations

import pytest

from nrt.core.eventlog import EventLog
from nrt.core.eventlog.export import export_line, verify_lines
from nrt.core.state import fold
from nrt.core.state.snapshot import FOLD_VERSION, encode_state, fold_log, save, verify_snapshots
from nrt.testing.traffic import traffic
from store_backends import Backend


async def test_save_and_find_the_latest_at_or_before(log: EventLog) -> None:
    assert await log.latest_snapshot(FOLD_VERSION) is None
    await log.append(list(traffic(30)))
    first = await log.save_snapshot(10, FOLD_VERSION, b"ten")
    await log.save_snapshot(20, FOLD_VERSION, b"twenty")
    await log.save_snapshot(25, FOLD_VERSION + 1, b"another fold")
    assert first.position == 10
    assert first.created_at is not None
    assert len(first.chain_hash) == 32
    latest = await log.latest_snapshot(FOLD_VERSION)
    assert latest is not None
    assert (latest.position, latest.state) == (20, b"twenty")
    before = await log.latest_snapshot(FOLD_VERSION, 19)
    assert before is not None
    assert (before.position, before.state) == (10, b"ten")
    assert await log.latest_snapshot(FOLD_VERSION, 9) is None
    other = await log.latest_snapshot(FOLD_VERSION + 1)
    assert other is not None
    assert other.position == 25
    assert [(s.position, s.fold_version) for s in await log.snapshots()] == [
        (10, FOLD_VERSION),
        (20, FOLD_VERSION),
        (25, FOLD_VERSION + 1),
    ]


async def test_saving_again_replaces_and_a_missing_position_is_refused(log: EventLog) -> None:
    await log.append(list(traffic(5)))
    await log.save_snapshot(5, FOLD_VERSION, b"old")
    await log.save_snapshot(5, FOLD_VERSION, b"new")
    latest = await log.latest_snapshot(FOLD_VERSION)
    assert latest is not None
    assert latest.state == b"new"
    assert len(await log.snapshots()) == 1
    with pytest.raises(ValueError, match="no row at position 6"):
        await log.save_snapshot(6, FOLD_VERSION, b"ahead of the log")


async def test_a_snapshot_whose_chain_hash_no_longer_matches_is_not_used(backend: Backend) -> None:
    log = backend.log
    await log.append(list(traffic(20)))
    await log.save_snapshot(8, FOLD_VERSION, b"eight")
    await log.save_snapshot(15, FOLD_VERSION, b"fifteen")
    backend.edit_field(15, "model_id", "rewritten")  # the row changes; its stored hash does not
    latest = await log.latest_snapshot(FOLD_VERSION)
    assert latest is not None
    assert latest.position == 15
    backend.delete_row(15)
    latest = await log.latest_snapshot(FOLD_VERSION)
    assert latest is not None
    assert latest.position == 8


async def test_fold_from_a_snapshot_equals_a_full_fold(log: EventLog) -> None:
    events = list(traffic(400))
    await log.append(events)
    await save(log, 150, fold(events[:150]))
    await save(log, 300, fold(events[:300]))
    assert await fold_log(log) == (400, fold(events))
    assert await fold_log(log, 200) == (200, fold(events[:200]))
    assert await fold_log(log, 300) == (300, fold(events[:300]))
    assert await fold_log(log, 100) == (100, fold(events[:100]))


async def test_verify_snapshots_names_a_tampered_one(backend: Backend) -> None:
    log = backend.log
    events = list(traffic(200))
    await log.append(events)
    await save(log, 50, fold(events[:50]))
    await save(log, 120, fold(events[:120]))
    await log.save_snapshot(130, FOLD_VERSION + 1, b"another fold: not checked")
    report = await verify_snapshots(log)
    assert (report.ok, report.checked, report.skipped) == (True, 2, 1)
    assert "2 match" in report.render()
    wrong = fold(events[:119])  # off by one event
    backend.edit_snapshot(120, FOLD_VERSION, encode_state(wrong))
    report = await verify_snapshots(log)
    assert not report.ok
    assert report.first_bad_position == 120
    assert report.checked == 1
    assert "differs from the fold" in report.render()
    backend.edit_snapshot(50, FOLD_VERSION, b"\xc1 not msgpack")
    report = await verify_snapshots(log)
    assert not report.ok
    assert report.first_bad_position == 50
    assert "does not decode" in (report.reason or "")


async def test_chain_rows_export_and_verify_offline(log: EventLog) -> None:
    await log.append(list(traffic(120)))
    rows = [row async for row in log.chain_rows()]
    assert [r.position for r in rows] == list(range(1, 121))
    assert [r.position async for r in log.chain_rows(30, 40)] == list(range(30, 41))
    assert verify_lines(export_line(r) for r in rows).render() == "hash chain intact: 120 events verified"
    excerpt = [export_line(r) for r in rows[29:40]]
    assert verify_lines(excerpt).checked == 11
    broken = verify_lines([*excerpt[:3], *excerpt[4:]])
    assert not broken.ok
    assert broken.first_bad_position == 33
    assert "a row was deleted" in (broken.reason or "")
    garbage = verify_lines([excerpt[0], b"{not json"])
    assert not garbage.ok
    assert "line 2 is not an export line" in (garbage.reason or "")
