"""The fast layer's promise, enforced: a test here starts no subprocess and opens no TCP connection.

Each test runs with ``subprocess.Popen`` and TCP ``connect`` replaced by functions that fail
naming what was tried (``fast_guard``), so a test that needs a server or a process fails here
instead of slowing the layer down: it belongs in ``tests/integration``.
"""

from __future__ import annotations

import socket
import subprocess

import pytest

from fast_guard import no_subprocess, no_tcp, no_tcp_ex


@pytest.fixture(autouse=True)
def no_server_no_subprocess(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(subprocess.Popen, "__init__", no_subprocess)
    monkeypatch.setattr(socket.socket, "connect", no_tcp)
    monkeypatch.setattr(socket.socket, "connect_ex", no_tcp_ex)
