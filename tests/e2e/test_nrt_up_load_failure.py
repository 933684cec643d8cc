"""`nrt up` on a manifest whose specialist cannot be loaded: it gives up naming the model and the
reason, instead of waiting for readiness until its timeout, and stops the stack it started."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from nrt.adapters.infra import free_port
from stack_processes import STACK_ENV, alive, descendants, tiny_manifest


def start_time(pid: int) -> str:
    """When ``pid`` started (in clock ticks since boot; "" when it is gone): a pid and its start time
    name one process, even once the pid is reused."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def stop(process: subprocess.Popen[bytes], seen: set[tuple[int, str]]) -> None:
    """A failed test's cleanup: `nrt up` still waiting gets SIGTERM (it stops its stack), then SIGKILL."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)
    for pid, started_at in seen:
        if start_time(pid) == started_at:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)  # what it left behind: not to outlive the test


READY_TIMEOUT = 900  # `nrt up`'s default: what it would wait before this fix
GIVES_UP_WITHIN = 240  # the stack's start on a busy machine, one failed load and the stop


def test_nrt_up_gives_up_on_a_model_that_cannot_load_names_it_and_leaves_nothing_behind(
    nrt_home: Path, tmp_path: Path
) -> None:
    manifest = tmp_path / "unusable.yaml"
    good = '{id: billing, source: "catalogue://tiny-llama"'
    text = tiny_manifest("unusable")
    assert good in text
    manifest.write_text(text.replace(good, '{id: billing, source: "hf://nobody/missing"'))
    log = tmp_path / "nrt-up.log"
    env = {k: v for k, v in os.environ.items() if k not in STACK_ENV} | {"HF_HUB_OFFLINE": "1"}
    argv = [
        sys.executable,
        "-m",
        "nrt.entrypoints.cli.main",
        "up",
        "--manifest",
        str(manifest),
        "--port",
        str(free_port()),
    ]
    argv += ["--data-dir", str(tmp_path / "stack"), "--ready-timeout", str(READY_TIMEOUT)]
    started = time.monotonic()
    process = subprocess.Popen(argv, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
    seen: set[tuple[int, str]] = set()  # every process the stack ran: each must be gone once `nrt up` has exited
    try:
        while process.poll() is None:
            seen |= {(pid, started_at) for pid in descendants(process.pid) if (started_at := start_time(pid))}
            assert time.monotonic() - started < GIVES_UP_WITHIN, f"nrt up still waiting:\n{log.read_text()[-3000:]}"
            time.sleep(0.2)
        survivors = [pid for pid, started_at in seen if alive(pid) and start_time(pid) == started_at]
    finally:
        stop(process, seen)
    output = log.read_text()
    assert process.returncode == 1, output[-3000:]
    assert "giving up" in output
    assert "billing (on " in output  # the model, the worker that tried it and why it could not load it
    assert "unresolvable_source: source hf://nobody/missing: not in the Hugging Face cache" in output
    assert "NRT is up" not in output
    assert "nrt up: stopping" in output  # it stopped the stack on its way out
    assert "nrt up: cluster_state stopped" in output
    assert len(seen) >= 6, f"the stack did not start: {seen}"  # nats-server, postgres, the four services
    assert survivors == [], f"processes left behind: {survivors}"  # (the cleanup has killed them since)
