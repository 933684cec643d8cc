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

from nrt.cli.up import readiness_problem
from nrt.stack import endpoints
from nrt.stack.preflight import StackInUseError, claimed, lock_data_dir, require_free_port


def test_a_second_nrt_up_on_the_same_data_directory_is_refused_naming_the_first(tmp_path: Path) -> None:
    first = lock_data_dir(tmp_path)
    endpoints.write(
        endpoints.Endpoints(nats_url="n", database_url="d", gateway_url="http://127.0.0.1:8080", pid=os.getpid()),
        tmp_path,
    )
    assert (tmp_path / endpoints.ENDPOINTS_FILE).stat().st_mode & 0o777 == 0o600  # it holds a database password
    try:
        with pytest.raises(StackInUseError, match=rf"pid {os.getpid()}, serving http://127.0.0.1:8080.*--data-dir"):
            lock_data_dir(tmp_path)
    finally:
        os.close(first)
    os.close(lock_data_dir(tmp_path))  # released: free again


def test_a_port_another_process_listens_on_is_refused_and_the_lock_released(tmp_path: Path) -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        with (
            pytest.raises(StackInUseError, match=rf"port {port} on 127.0.0.1 is taken.*--port"),
            claimed(tmp_path, "127.0.0.1", port),
        ):
            pass
    os.close(lock_data_dir(tmp_path))  # the refused claim did not keep the directory
    require_free_port("127.0.0.1", port)  # closed: free now


def test_nrt_up_on_a_taken_port_fails_at_once_with_a_clear_message(tmp_path: Path) -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if k not in ("NRT_NATS_URL", "NRT_DATABASE_URL")}
        began = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "nrt.cli.main", "up", "--port", str(port), "--data-dir", str(tmp_path / "stack")],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 1
    assert f"port {port} on 127.0.0.1 is taken by another process" in done.stderr
    assert "NRT is up" not in done.stdout
    assert time.monotonic() - began < 30
    assert not (tmp_path / "stack" / "nats").exists()  # nothing was started


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
