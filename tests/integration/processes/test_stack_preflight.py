"""`nrt up` refuses, before starting anything, a data directory or a gateway port that is not its own."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from nrt.adapters.infra.ports import free_port, held_by, port_holders
from nrt.entrypoints.cli.up import readiness_problem
from nrt.entrypoints.stack import endpoints
from nrt.entrypoints.stack.preflight import LOCK_FILE, StackInUseError, claimed, lock_data_dir, require_free_port


def _listening() -> socket.socket:
    """A socket of this process listening on a free port of 127.0.0.1."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def test_a_second_nrt_up_on_the_same_data_directory_is_refused_naming_the_first(tmp_path: Path) -> None:
    lock = tmp_path / LOCK_FILE
    with claimed(tmp_path, "127.0.0.1", free_port()):
        assert lock.read_text() == f"{os.getpid()}\n"  # the owner names itself
        endpoints.write(
            endpoints.Endpoints(nats_url="n", database_url="d", gateway_url="http://127.0.0.1:8080", pid=os.getpid()),
            tmp_path,
        )
        assert (tmp_path / endpoints.ENDPOINTS_FILE).stat().st_mode & 0o777 == 0o600  # it holds a database password
        with pytest.raises(StackInUseError, match=rf"pid {os.getpid()}, serving http://127.0.0.1:8080.*--data-dir"):
            lock_data_dir(tmp_path)
        assert lock.read_text() == f"{os.getpid()}\n"  # the refused one wrote nothing
    assert lock.read_text() == ""  # let go: nobody owns it
    os.close(lock_data_dir(tmp_path))  # released: free again


def test_a_port_another_process_listens_on_is_refused_naming_it_and_the_lock_left_as_found(tmp_path: Path) -> None:
    lock = tmp_path / LOCK_FILE
    lock.write_text("4242\n")  # what a crashed `nrt up` left
    with _listening() as other:
        port = other.getsockname()[1]
        with (
            pytest.raises(StackInUseError, match=rf"port {port} on 127.0.0.1 is taken by pid {os.getpid()} \(.+--port"),
            claimed(tmp_path, "127.0.0.1", port),
        ):
            pass
    assert lock.read_text() == "4242\n"
    os.close(lock_data_dir(tmp_path))  # the refused claim did not keep the directory
    require_free_port("127.0.0.1", port)  # closed: free now


def test_what_holds_a_port_is_named_when_it_can_be_seen() -> None:
    with _listening() as other:
        port = other.getsockname()[1]
        assert port_holders(port) == [held_by(port)]
        assert held_by(port).startswith(f"pid {os.getpid()} (")
        assert sys.executable in held_by(port)  # its command line
    assert port_holders(port) == []
    assert held_by(port) == "another process"


def test_nrt_up_on_a_taken_port_fails_at_once_naming_the_holder_and_leaves_the_lock_file_alone(tmp_path: Path) -> None:
    data_dir = tmp_path / "stack"
    data_dir.mkdir()
    (data_dir / LOCK_FILE).write_text("4242\n")
    with _listening() as other:
        port = other.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if k not in ("NRT_NATS_URL", "NRT_DATABASE_URL")}
        began = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "nrt.entrypoints.cli.main", "up", "--port", str(port), "--data-dir", str(data_dir)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 1
    assert f"port {port} on 127.0.0.1 is taken by pid {os.getpid()} (" in done.stderr
    assert "Traceback" not in done.stderr
    assert "NRT is up" not in done.stdout
    assert time.monotonic() - began < 30
    assert not (data_dir / "nats").exists()  # nothing was started
    assert (data_dir / LOCK_FILE).read_text() == "4242\n"


async def test_readiness_is_that_of_this_stacks_own_gateway() -> None:
    def answer(instance: str | None) -> httpx.MockTransport:
        body = {"status": "ready", "checks": {}} | ({"instance": instance} if instance else {})
        return httpx.MockTransport(lambda _: httpx.Response(200, json=body))

    async with httpx.AsyncClient(transport=answer("ours")) as client:
        assert await readiness_problem(client, "http://gw", "ours") is None
    async with httpx.AsyncClient(transport=answer("theirs")) as client:
        assert await readiness_problem(client, "http://gw", "ours") == (
            "http://gw is not this stack's gateway (instance 'theirs', expected 'ours')"
        )
    async with httpx.AsyncClient(transport=answer(None)) as client:  # an older gateway, or anything else
        assert "is not this stack's gateway" in (await readiness_problem(client, "http://gw", "ours") or "")
