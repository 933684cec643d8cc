"""scripts/gpu-check on a machine without a GPU: its help names both halves, a dry run says what would run
and that it needs a GPU, and ``run`` stops at once, saying so in its results file (exit status 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from paths import ROOT

SCRIPT = ROOT / "scripts" / "gpu-check"


def gpu_check(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """The script with no nvidia-smi on its PATH (a GPU host's tests see none either), and this interpreter."""
    path = os.pathsep.join(
        d for d in os.environ.get("PATH", "").split(os.pathsep) if d and not (Path(d) / "nvidia-smi").exists()
    )
    env = {**os.environ, "PATH": path, "NRT_PYTHON": sys.executable}
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60, check=False
    )


def test_the_help_names_the_two_halves_and_the_targets(tmp_path: Path) -> None:
    for args in ((), ("--help",)):
        done = gpu_check(*args, tmp_path=tmp_path)
        assert done.returncode == 0, done.stderr
        for words in ("prepare", "receive", "run", "64 MiB", "0.9x the bare ONNX Runtime CUDA loop", "10%"):
            assert words in done.stdout


def test_a_dry_run_without_a_gpu_says_that_the_check_needs_one(tmp_path: Path) -> None:
    done = gpu_check("run", "--dry-run", "--dir", str(tmp_path / "parts"), tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "this check needs an NVIDIA GPU (CUDA): none here" in done.stdout
    assert "`run` would stop at once" in done.stdout
    assert "pytest -p pytest_asyncio.plugin -p pytest_timeout -m gpu" in done.stdout
    assert "tests/integration/worker/test_gpu.py" in done.stdout


def test_run_without_a_gpu_writes_why_to_its_results_file(tmp_path: Path) -> None:
    results = tmp_path / "gpu-check.json"
    done = gpu_check("run", "--results", str(results), "--dir", str(tmp_path / "parts"), tmp_path=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    data = json.loads(results.read_text())
    assert data["verdict"] == "failed"
    assert data["missed"] == [
        "stage device: failed (this check needs an NVIDIA GPU (CUDA): none here (nvidia-smi is not on the PATH))"
    ]
    assert "GPU check: failed" in done.stdout
