"""The fast layer's guard (tests/fast/conftest.py) refuses what would need another layer."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from fast_guard import NotInTheFastLayer


def test_a_subprocess_is_refused_with_where_the_test_belongs() -> None:
    with pytest.raises(NotInTheFastLayer, match="tests/integration"):
        subprocess.run([sys.executable, "-c", "pass"], check=False)


def test_a_tcp_connection_is_refused() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock, pytest.raises(NotInTheFastLayer):
        sock.connect(("127.0.0.1", 4222))
