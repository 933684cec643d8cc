"""A whole stack started with `nrt up` as a subprocess (embedded NATS and PostgreSQL).

`nrt up` runs in a process group of its own, as a shell's foreground job does, so a test
can send it Ctrl-C the way a terminal does (SIGINT to the group).
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

from nrt.adapters.infra import free_port
from nrt.entrypoints.stack.endpoints import discover, stack_dir
from stack_processes import STACK_ENV, OtlpReceiver, Stack


@pytest.fixture
def start_stack(tmp_path: Path) -> Iterator[object]:
    started: list[Stack] = []

    def start(
        manifest: Path, ready_within: float = 600.0, in_nrt_home: bool = False, extra_env: dict[str, str] | None = None
    ) -> Stack:
        """``in_nrt_home``: no ``--data-dir``, so the stack lives in NRT_HOME/stack as a user's does."""
        data_dir = stack_dir() if in_nrt_home else tmp_path / "stack"
        log = tmp_path / "nrt-up.log"
        env = {k: v for k, v in os.environ.items() if k not in STACK_ENV} | (extra_env or {})
        port = free_port()
        argv = [
            sys.executable,
            "-m",
            "nrt.entrypoints.cli.main",
            "up",
            "--manifest",
            str(manifest),
            "--port",
            str(port),
        ]
        if not in_nrt_home:
            argv += ["--data-dir", str(data_dir)]
        process = subprocess.Popen(
            [*argv, "--ready-timeout", str(ready_within)],
            env=env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
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


@pytest.fixture
def otlp_receiver() -> Iterator[OtlpReceiver]:
    """An OTLP/HTTP trace receiver on a free local port, as a tracing backend would run one."""
    receiver = OtlpReceiver()
    yield receiver
    receiver.close()
