"""What the fast layer refuses (tests/fast/conftest.py): subprocesses and TCP connections."""

from __future__ import annotations

import socket
import subprocess
from typing import Any

_TCP = (socket.AF_INET, socket.AF_INET6)
_connect = socket.socket.connect
_connect_ex = socket.socket.connect_ex


class NotInTheFastLayer(RuntimeError):
    """What a fast test tried that needs another layer."""


def no_subprocess(self: subprocess.Popen[Any], *args: Any, **kwargs: Any) -> None:
    raise NotInTheFastLayer(
        f"a subprocess ({args[0] if args else kwargs.get('args')!r}): move the test to tests/integration"
    )


def no_tcp(self: socket.socket, address: Any, *args: Any) -> Any:
    if self.family in _TCP:
        raise NotInTheFastLayer(f"a TCP connection to {address}: move the test to tests/integration")
    return _connect(self, address, *args)


def no_tcp_ex(self: socket.socket, address: Any, *args: Any) -> Any:
    if self.family in _TCP:
        raise NotInTheFastLayer(f"a TCP connection to {address}: move the test to tests/integration")
    return _connect_ex(self, address, *args)
