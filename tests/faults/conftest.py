"""A whole stack started with `nrt up` in this test's NRT_HOME (embedded NATS and PostgreSQL), for fault tests.

The stack lives where a user's does (NRT_HOME/stack), so `nrt replay` and `nrt audit verify`
find it as an operator's commands would. Stopped with SIGTERM at the end of the test.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fault_kit import STACK_ENV, FaultStack
from nrt.adapters.infra import free_port
from nrt.entrypoints.stack.endpoints import discover, stack_dir
from nrt.testing.stacks import tiny_manifest


@pytest.fixture
def nrt_up_options() -> list[str]:
    """More options for the stack's `nrt up` (a test module overrides this fixture: `--nats-cluster 3`)."""
    return []


@pytest.fixture
def fault_stack(nrt_home: Path, tmp_path: Path, nrt_up_options: list[str]) -> Iterator[FaultStack]:
    manifest = tmp_path / "tiny.yaml"
    manifest.write_text(tiny_manifest("tiny-faults", legal_tier="resident"))
    log = tmp_path / "nrt-up.log"
    env = {k: v for k, v in os.environ.items() if k not in STACK_ENV}
    argv = [
        sys.executable,
        "-m",
        "nrt.entrypoints.cli.main",
        "up",
        "--manifest",
        str(manifest),
        "--port",
        str(free_port()),
        *nrt_up_options,
    ]
    process = subprocess.Popen(
        [*argv, "--ready-timeout", "300"],
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 420
        while (found := discover(stack_dir())) is None:
            assert process.poll() is None, f"nrt up exited with {process.returncode}:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"nrt up was not ready in time:\n{log.read_text()[-3000:]}"
            time.sleep(0.5)
        assert httpx.get(f"{found.gateway_url}/readyz", timeout=5).status_code == 200
        yield FaultStack(process, found, log)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGCONT)  # nothing stays stopped
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
