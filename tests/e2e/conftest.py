"""A whole stack started with `nrt up` as a subprocess (embedded NATS and PostgreSQL)."""

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
from stack_processes import Stack

from nrt.infra import free_port
from nrt.stack.endpoints import discover


@pytest.fixture
def start_stack(tmp_path: Path) -> Iterator[object]:
    started: list[Stack] = []

    def start(manifest: Path, ready_within: float = 600.0) -> Stack:
        data_dir = tmp_path / "stack"
        log = tmp_path / "nrt-up.log"
        env = {k: v for k, v in os.environ.items() if k not in ("NRT_NATS_URL", "NRT_DATABASE_URL")}
        port = free_port()
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "nrt.cli.main",
                "up",
                "--manifest",
                str(manifest),
                "--port",
                str(port),
                "--data-dir",
                str(data_dir),
                "--ready-timeout",
                str(ready_within),
            ],
            env=env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + ready_within + 120
        while (found := discover(data_dir)) is None:
            assert process.poll() is None, f"nrt up exited with {process.returncode}:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"nrt up was not ready in time:\n{log.read_text()[-3000:]}"
            time.sleep(0.5)
        assert httpx.get(f"{found.gateway_url}/readyz", timeout=5).status_code == 200
        stack = Stack(process, found, data_dir, log)
        started.append(stack)
        return stack

    yield start
    for stack in started:
        if stack.process.poll() is None:
            stack.process.send_signal(signal.SIGTERM)
            try:
                stack.process.wait(60)
            except subprocess.TimeoutExpired:
                stack.process.kill()
