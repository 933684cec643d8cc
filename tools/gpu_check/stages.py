"""The GPU check's stages, each run in a process group of its own with its timeout, all within the run's
deadline (TOTAL_S: under 8 minutes)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

TOTAL_S = 470.0  # the whole run: under 8 minutes
RESERVE_S = 10.0  # kept back from every stage for writing the results
MIN_STAGE_S = 15.0  # a stage given less than this is skipped, saying why


@dataclass(frozen=True)
class StageResult:
    name: str
    status: str  # passed | failed | timed out | skipped
    seconds: float
    detail: str = ""
    output_tail: str = ""


class Deadline:
    """The whole run's time limit; each stage gets what it asks for, or what is left less a reserve."""

    def __init__(self, total_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.total_s = total_s
        self._clock = clock
        self._start = clock()

    def elapsed(self) -> float:
        return self._clock() - self._start

    def left(self) -> float:
        return self.total_s - self.elapsed()

    def budget(self, wanted_s: float) -> float:
        return max(0.0, min(wanted_s, self.left() - RESERVE_S))


class Process(Protocol):
    pid: int
    returncode: int | None

    def communicate(self, timeout: float | None = None) -> tuple[str, str]: ...


def tail(text: str, limit: int = 4000) -> str:
    return text if len(text) <= limit else "…" + text[-limit:]


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def run_stage(
    name: str,
    argv: Sequence[str],
    timeout_s: float,
    deadline: Deadline,
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    popen: Callable[..., Process] = subprocess.Popen,  # type: ignore[assignment]
    kill: Callable[[int], None] = _kill_group,
) -> StageResult:
    """``argv`` in a process group of its own, stopped (with what it started) at its timeout or the deadline."""
    budget = deadline.budget(timeout_s)
    if budget < MIN_STAGE_S:
        return StageResult(
            name, "skipped", 0.0, f"not started: {deadline.left():.0f} s left of {deadline.total_s:.0f} s"
        )
    started = time.monotonic()
    try:
        process = popen(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    except OSError as exc:
        return StageResult(name, "failed", 0.0, f"could not start {argv[0]}: {exc}")
    try:
        output, _ = process.communicate(timeout=budget)
    except subprocess.TimeoutExpired:
        kill(process.pid)
        output, _ = process.communicate()
        return StageResult(
            name, "timed out", time.monotonic() - started, f"stopped after {budget:.0f} s", tail(output or "")
        )
    seconds = time.monotonic() - started
    status = "passed" if process.returncode == 0 else "failed"
    detail = "" if process.returncode == 0 else f"exit status {process.returncode}"
    return StageResult(name, status, seconds, detail, tail(output or ""))
