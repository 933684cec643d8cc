"""The lent machine's GPU, as nvidia-smi names it (or why there is none), and its architecture."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

NO_GPU = "this check needs an NVIDIA GPU (CUDA): none here"


@dataclass(frozen=True)
class Gpu:
    name: str
    driver: str
    memory_total: str
    compute_capability: str


def find_gpu(runner: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run) -> Gpu | str:
    """The first NVIDIA GPU as nvidia-smi names it; or why there is none."""
    if shutil.which("nvidia-smi") is None:
        return f"{NO_GPU} (nvidia-smi is not on the PATH)"
    try:
        got = runner(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{NO_GPU} (nvidia-smi: {exc})"
    line = got.stdout.strip().splitlines()[0] if got.returncode == 0 and got.stdout.strip() else ""
    fields = [f.strip() for f in line.split(",")]
    if len(fields) < 4:
        return f"{NO_GPU} (nvidia-smi: {(got.stdout + got.stderr).strip() or got.returncode})"
    return Gpu(*fields[:4])


def sm_of(compute_capability: str) -> int:
    major, _, minor = compute_capability.partition(".")
    return int(major) * 10 + int(minor or 0)
