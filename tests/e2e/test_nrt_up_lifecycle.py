"""`nrt up` that dies takes its stack with it; one that cannot start says why, without a traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from nrt.adapters.infra import EmbeddedNats, free_port
from nrt.entrypoints.cli.up import SERVICES
from nrt.testing.processes import command_line, executable_name, python_services
from nrt.testing.stacks import eventually
from stack_processes import STACK_ENV, alive, descendants, tiny_manifest

TINY = tiny_manifest("tiny-lifecycle")


def _stack_processes(root: int) -> dict[str, list[int]]:
    """The processes below `nrt up`, by what they are: nats-server, the postmaster and its children
    (backends among them), each service."""
    below = descendants(root)
    postgres = sorted(pid for pid in below if executable_name(pid) == "postgres")
    found = {
        "nats-server": [pid for pid in below if executable_name(pid) == "nats-server"],
        "postgres": postgres,
        "postgres backends": [pid for pid in postgres if "127.0.0.1(" in " ".join(command_line(pid))],
    }
    return found | {service: [pid] for service, pid in python_services(root, SERVICES).items()}


def test_a_killed_nrt_up_leaves_no_process_behind_and_starts_again_on_its_data(  # type: ignore[no-untyped-def]
    start_stack, nrt_home: Path, tmp_path: Path
) -> None:
    manifest = tmp_path / "tiny.yaml"
    manifest.write_text(TINY)
    stack = start_stack(manifest)
    processes = _stack_processes(stack.process.pid)
    missing = [what for what in ("nats-server", "postgres", "postgres backends", *SERVICES) if not processes.get(what)]
    assert missing == [], f"not found below nrt up: {missing} (found {processes})"
    pids = {pid for group in processes.values() for pid in group}

    os.kill(stack.process.pid, signal.SIGKILL)  # no goodbye: nothing of nrt up's own shutdown runs
    assert stack.process.wait(10) == -signal.SIGKILL
    eventually(
        lambda: not [pid for pid in pids if alive(pid)],
        15,
        f"every process of the killed stack gone (still running: {[p for p in pids if alive(p)]})",
    )

    again = start_stack(manifest)  # the same data directory
    assert again.data_dir == stack.data_dir
    assert again.process.poll() is None


def test_a_stray_server_on_the_data_directory_is_named_without_a_traceback(nrt_home: Path, tmp_path: Path) -> None:
    manifest = tmp_path / "tiny.yaml"
    manifest.write_text(TINY)
    data_dir = tmp_path / "stack"
    env = {k: v for k, v in os.environ.items() if k not in STACK_ENV}
    argv = [
        sys.executable,
        "-m",
        "nrt.entrypoints.cli.main",
        "up",
        "--manifest",
        str(manifest),
        "--data-dir",
        str(data_dir),
    ]
    with EmbeddedNats(data_dir / "nats") as stray:  # e.g. left over by an `nrt up` of an older release
        done = subprocess.run(
            [*argv, "--port", str(free_port())], env=env, capture_output=True, text=True, timeout=300, check=False
        )
        assert stray.running  # named, not touched
        pid = stray.pid
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert f"nats-server (pid {pid}) is already running on {data_dir / 'nats'}" in done.stderr
    assert f"kill -TERM {pid}" in done.stderr
