"""Several hosts migrate one fresh database at once (each `nrt up` given the cluster's database): all succeed."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from nrt.adapters.infra.pgurl import to_libpq, with_database

# Imports first (seconds), then waits for the go file, so that the migrations themselves start together.
MIGRATE = """
import sys, time
from pathlib import Path
from nrt.adapters.store import upgrade
Path(sys.argv[2] + ".ready." + sys.argv[3]).touch()
while not Path(sys.argv[2]).exists():
    time.sleep(0.01)
upgrade(sys.argv[1])
"""


@pytest.fixture
def empty_database(postgres_url: str) -> Iterator[str]:
    name = f"nrt_empty_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(to_libpq(postgres_url), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield with_database(postgres_url, name)
    with psycopg.connect(to_libpq(postgres_url), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_processes_migrating_one_fresh_database_at_once_all_succeed(empty_database: str, tmp_path: Path) -> None:
    go = tmp_path / "go"
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", MIGRATE, empty_database, str(go), str(i)], stderr=subprocess.PIPE, text=True
        )
        for i in range(3)
    ]
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("go.ready.*"))) < len(processes):
        assert time.monotonic() < deadline, "the migrating processes did not start"
        time.sleep(0.05)
    go.touch()
    errors = [process.communicate(timeout=120)[1] for process in processes]
    assert [process.returncode for process in processes] == [0, 0, 0], errors
    with psycopg.connect(to_libpq(empty_database)) as conn:
        versions = conn.execute("SELECT version_num FROM alembic_version").fetchall()
    assert len(versions) == 1, versions
