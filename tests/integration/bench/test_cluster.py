"""bench.cluster end to end on tiny sizes: ``python -m bench.cluster --workers 2 4`` runs cluster_state as its own
process on an embedded NATS server and a fresh database, with simulated workers, and prints every figure.

Asserts the report's lines and that they are consistent with what was run, not the speed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

NUMBER = r"(-?[\d,]+(?:\.\d+)?)"


def figure(lines: list[str], name: str) -> tuple[float, float]:
    """The value and the ratio of the report line that starts with ``name``."""
    pattern = re.compile(rf"^{re.escape(name)}\s+{NUMBER} \S+\s+ratio\s+{NUMBER} vs 2 workers")
    for line in lines:
        match = pattern.match(line)
        if match:
            return float(match.group(1).replace(",", "")), float(match.group(2).replace(",", ""))
    raise AssertionError(f"no line {name!r} in the report:\n" + "\n".join(lines))


def test_the_cluster_bench_reports_every_figure_per_size(postgres_url: str, repo_root: Path) -> None:
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.cluster",
            "--workers",
            "4",
            "2",  # sorted by the bench: 2 is the smallest
            "--duration",
            "2",
            "--probes",
            "2",
            "--database-url",
            postgres_url,
        ],
        cwd=repo_root,
        env=os.environ,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, f"bench.cluster failed:\n{run.stdout}\n{run.stderr[-4000:]}"
    lines = run.stdout.splitlines()
    assert lines[0].startswith("cluster: cluster_state with 2, 4 simulated workers")

    for n in (2, 4):
        join_ms, _ = figure(lines, f"join -> load command at {n} workers")
        decided_ms, _ = figure(lines, f"join -> ModelPlaced (log) at {n} workers")
        assert 0 < decided_ms <= join_ms < 30_000, "the decision comes before its command reaches the worker"
        cpu_us, _ = figure(lines, f"CPU per heartbeat at {n} workers")
        assert abs(cpu_us) < 1e6, "a heartbeat's CPU is a finite figure in microseconds"
    for name in ("CPU per heartbeat", "join -> load command", "fold size", "ticks' policies per worker"):
        assert figure(lines, f"{name} at 2 workers")[1] == 1.0, "the smallest size is its own reference"

    small, _ = figure(lines, "fold size at 2 workers")
    large, ratio = figure(lines, "fold size at 4 workers")
    assert 0 < small < large, "two more workers make the folded state larger"
    assert ratio == round(large / small, 2)

    tick_us, _ = figure(lines, "ticks' policies per worker at 4 workers")
    beat_us, _ = figure(lines, "heartbeat bookkeeping at 4 workers")
    assert tick_us > 0
    assert beat_us > 0
    figure(lines, "added cost per worker 2 -> 4")

    last = lines[-1]
    assert re.match(rf"^per-worker cost at 4 workers\s+{NUMBER} ms/s\s+ratio\s+{NUMBER} vs 2 workers", last), last
    assert last.endswith((" met", " MISSED"))

    table = lines.index(next(line for line in lines if line.split()[:1] == ["workers"]))
    for row, n in zip(lines[table + 1 : table + 3], (2, 4), strict=True):
        columns = row.split()
        assert int(columns[0]) == n
        assert float(columns[3]) > 0, f"the fleet of {n} heartbeated during the steady window: {row}"
