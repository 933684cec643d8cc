"""Shared benchmark plumbing: a PostgreSQL server, fresh migrated databases, timing and output."""

from __future__ import annotations

import contextlib
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg

from nrt.adapters.infra.pgurl import to_libpq, with_database
from nrt.adapters.store import upgrade
from nrt.testing.servers import postgres_server


@contextlib.contextmanager
def postgres() -> Iterator[str]:
    """NRT_DATABASE_URL's server when set, else an embedded one in a temporary directory."""
    with (
        tempfile.TemporaryDirectory(prefix="nrt-bench-") as data_dir,
        postgres_server(data_dir, env_var="NRT_DATABASE_URL", use_docker=False) as url,
    ):
        yield url


@contextlib.contextmanager
def fresh_database(server_url: str, migrate: bool = True) -> Iterator[str]:
    name = f"nrt_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(to_libpq(server_url), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = with_database(server_url, name)
    try:
        if migrate:
            upgrade(url)
        yield url
    finally:
        with psycopg.connect(to_libpq(server_url), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@dataclass
class Timer:
    seconds: float = 0.0

    @contextlib.contextmanager
    def run(self) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds += time.perf_counter() - started


FIGURES: list[dict[str, object]] = []  # every figure reported in this process, for a results file (bench.worker --json)


def report(
    name: str,
    value: float,
    unit: str,
    ratio: float | None = None,
    floor: str = "",
    target: str = "",
    precision: int = 0,
    met: bool | None = None,
) -> None:
    """One figure; with ``ratio`` against ``floor``, its ``target`` and whether it is ``met``."""
    line = f"{name:<44} {value:>14,.{precision}f} {unit:<10}"
    if ratio is not None:
        line += f" ratio {ratio:5.2f} vs {floor}"
        if target:
            line += f" (target {target})"
        if met is not None:
            line += " met" if met else " MISSED"
    print(line, flush=True)
    FIGURES.append(
        {"name": name, "value": value, "unit": unit, "ratio": ratio, "floor": floor, "target": target, "met": met}
    )
