"""Embedded PostgreSQL: query, stop, restart with data kept, isolation, root handling, clean stop."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import psutil
import psycopg
import pytest
import sqlalchemy

from infra_helpers import assert_all_gone, process_tree
from nrt.adapters.infra import DataDirInUseError, EmbeddedPostgres, ServerStartError, free_port

SYSTEM_POSTGRES_PORT = 5432  # a system PostgreSQL may run there: never ours


def test_query_stop_restart_keeps_data(tmp_path: Path, record_timing: list[tuple[str, float]]) -> None:
    pg = EmbeddedPostgres(tmp_path / "pg")
    began = time.monotonic()
    pg.start()
    record_timing.append(("EmbeddedPostgres.start (initdb + start, durable)", time.monotonic() - began))
    initdb_s = pg.initdb_s
    assert initdb_s is not None
    record_timing.append(("  of which initdb", initdb_s))
    try:
        assert pg.port != SYSTEM_POSTGRES_PORT
        assert pg.url == f"postgresql+psycopg://postgres@127.0.0.1:{pg.port}/postgres"
        assert pg.dsn == f"postgresql://postgres@127.0.0.1:{pg.port}/postgres"
        with psycopg.connect(pg.dsn, autocommit=True) as conn:
            assert conn.execute("SHOW fsync").fetchone() == ("on",)
            assert conn.execute("SHOW listen_addresses").fetchone() == ("127.0.0.1",)
            conn.execute("CREATE TABLE facts (id int PRIMARY KEY, body text NOT NULL)")
            conn.execute("INSERT INTO facts VALUES (1, 'kept across restarts')")
        pids = process_tree(pg.pid or -1)
        assert len(pids) > 1  # postmaster and its auxiliary processes
    finally:
        pg.stop()
    assert_all_gone(pids)
    assert (tmp_path / "pg" / "pgdata" / "PG_VERSION").is_file()

    began = time.monotonic()
    pg.start()
    record_timing.append(("EmbeddedPostgres.start (restart, existing cluster)", time.monotonic() - began))
    try:
        assert pg.initdb_s is None
        with psycopg.connect(pg.dsn) as conn:
            assert conn.execute("SELECT body FROM facts WHERE id = 1").fetchone() == ("kept across restarts",)
        pids = process_tree(pg.pid or -1)
    finally:
        pg.stop()
    assert_all_gone(pids)


def test_sqlalchemy_url_and_ensure_database(tmp_path: Path, record_timing: list[tuple[str, float]]) -> None:
    began = time.monotonic()
    with EmbeddedPostgres(tmp_path / "pg", durable=False) as pg:
        record_timing.append(("EmbeddedPostgres.start (initdb + start, durable=False)", time.monotonic() - began))
        url = pg.ensure_database("nrt_test")
        assert url == pg.url_for("nrt_test")
        assert pg.ensure_database("nrt_test") == url  # idempotent
        engine = sqlalchemy.create_engine(url)
        try:
            with engine.connect() as conn:
                assert conn.execute(sqlalchemy.text("SELECT current_database()")).scalar_one() == "nrt_test"
        finally:
            engine.dispose()


def test_temporary_data_dir_is_removed_and_a_given_one_kept(tmp_path: Path) -> None:
    with EmbeddedPostgres(durable=False) as temporary:
        data_dir = temporary.data_dir
        assert data_dir is not None
        assert data_dir.is_dir()
    assert not data_dir.exists()

    with EmbeddedPostgres(tmp_path / "kept", durable=False):
        pass
    assert (tmp_path / "kept" / "pgdata" / "PG_VERSION").is_file()


def test_a_second_owner_of_a_running_data_dir_is_refused(tmp_path: Path) -> None:
    with EmbeddedPostgres(tmp_path / "pg", durable=False) as first:
        with pytest.raises(DataDirInUseError, match=rf"pid {first.pid}"):
            EmbeddedPostgres(tmp_path / "pg").start()
        with psycopg.connect(first.dsn) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)


def test_requested_port_and_a_port_in_use(tmp_path: Path) -> None:
    port = free_port()
    with EmbeddedPostgres(tmp_path / "a", port=port, durable=False) as pg:
        assert pg.port == port
        # the holder named is the postmaster, or a child of it that had the listening socket when psutil looked
        # (one that exits meanwhile is named by its pid alone)
        with pytest.raises(ServerStartError, match=rf"on 127\.0\.0\.1:{port}: pid \d+.* already listens") as caught:
            EmbeddedPostgres(tmp_path / "b", port=port, durable=False).start()
        named = [int(pid) for pid in re.findall(r"pid (\d+)", str(caught.value))]
        family = {pg.pid, *(child.pid for child in psutil.Process(pg.pid).children(recursive=True))}
        assert all(pid in family or not psutil.pid_exists(pid) for pid in named), (str(caught.value), family)


@pytest.mark.skipif(os.geteuid() != 0, reason="root only: checks the privilege drop")
def test_as_root_the_server_runs_as_an_unprivileged_account(tmp_path: Path) -> None:
    private = tmp_path / "private"  # root-only ancestors: the server account cannot cross them
    private.mkdir(mode=0o700)
    modes = {p: p.stat().st_mode for p in [private, *private.parents]}
    with EmbeddedPostgres(private / "pg", durable=False) as pg:
        assert pg.identity is not None
        assert pg.identity.uid != 0
        assert (private / "pg" / "pgdata").stat().st_uid == pg.identity.uid
        assert psutil.Process(pg.pid).uids().effective == pg.identity.uid
        with psycopg.connect(pg.dsn) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    assert {p: p.stat().st_mode for p in modes} == modes  # no permission was widened


def _run_forked_as(uid: int, gid: int, data_dir: Path) -> dict[str, object]:
    """Run EmbeddedPostgres in a forked child that dropped root for ``uid``; return its report.

    A fork rather than a new interpreter: the interpreter may live where an
    unprivileged user cannot read it (e.g. under /root), but the forked child
    already has every module it needs loaded.
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            began = time.monotonic()
            with EmbeddedPostgres(data_dir, durable=False) as pg:
                elapsed = time.monotonic() - began
                with psycopg.connect(pg.dsn) as conn:
                    row = conn.execute("SELECT current_user").fetchone()
                server_uid = psutil.Process(pg.pid).uids().effective
                report = {"euid": os.geteuid(), "dropped": pg.identity is not None, "user": row and row[0]}
                report |= {"server_uid": server_uid, "elapsed": elapsed}
        except BaseException as exc:
            report, code = {"error": f"{type(exc).__name__}: {exc}"}, 1
        os.write(write_end, json.dumps(report).encode())
        os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        payload = pipe.read()
    _, status = os.waitpid(pid, 0)
    report = json.loads(payload or b"{}")
    assert os.waitstatus_to_exitcode(status) == 0, report
    return dict(report)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become an unprivileged user")
def test_works_as_a_normal_user(record_timing: list[tuple[str, float]]) -> None:
    nobody = 65534
    home = Path(f"/tmp/nrt-infra-as-user-{os.getpid()}")  # a place an unprivileged user can reach
    home.mkdir(mode=0o700)
    os.chown(home, nobody, nobody)
    try:
        report = _run_forked_as(nobody, nobody, home / "pg")
    finally:
        shutil.rmtree(home, ignore_errors=True)
    assert report["euid"] == nobody
    assert report["dropped"] is False  # as a normal user the server runs as that user
    assert report["server_uid"] == nobody
    assert report["user"] == "postgres"
    elapsed = report["elapsed"]
    assert isinstance(elapsed, float)
    record_timing.append(("EmbeddedPostgres.start as a normal user (initdb + start)", elapsed))
