"""Local TCP port helpers."""

from __future__ import annotations

import socket
import time

import psutil  # type: ignore[import-untyped,unused-ignore]

from nrt.adapters.infra.errors import PortTimeoutError

LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    """Return a TCP port on ``host`` that nothing listens on right now.

    The kernel picks it from the ephemeral range, so it never collides with a
    well-known port such as a system PostgreSQL (5432) or NATS (4222). Another
    process may still grab it before the caller binds: callers that start a
    server retry on "address in use".
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def port_is_open(host: str, port: int, timeout: float = 0.25) -> bool:
    """True when a TCP connection to ``host:port`` succeeds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_for_port(host: str, port: int, timeout: float) -> None:
    """Block until ``host:port`` accepts TCP connections.

    Raises :class:`PortTimeoutError` (a :class:`TimeoutError`) naming the address,
    the time waited and the last connection error.
    """
    deadline = time.monotonic() + timeout
    last_error = "no attempt made"
    while True:
        remaining = deadline - time.monotonic()
        try:
            with socket.create_connection((host, port), timeout=max(0.05, min(1.0, remaining))):
                return
        except OSError as exc:
            last_error = f"{type(exc).__name__}: {exc}"
        if time.monotonic() >= deadline:
            raise PortTimeoutError(
                f"nothing accepted TCP connections on {host}:{port} within {timeout:.1f}s (last error: {last_error})"
            )
        time.sleep(0.02)


def _described(pid: int) -> str:
    """``pid 1234 (python -m api_gateway)``: the pid and its command line, shortened."""
    try:
        process = psutil.Process(pid)
        command = " ".join(" ".join(process.cmdline()).split()) or process.name()
    except psutil.Error:
        return f"pid {pid}"
    return f"pid {pid} ({command[:117] + '...' if len(command) > 120 else command})"


def port_holders(port: int) -> list[str]:
    """What listens on TCP ``port`` (any address): each process as ``pid N (its command line)``.

    Empty when none can be seen (a process of another user when we are not root, one in another
    network namespace).
    """
    try:
        connections = psutil.net_connections(kind="tcp")
    except psutil.Error:
        return []
    pids = sorted(
        {c.pid for c in connections if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid}
    )
    return [_described(pid) for pid in pids]


def held_by(port: int) -> str:
    """Who holds ``port``, for a message: ``pid N (command)`` (and more), else ``another process``."""
    return ", ".join(port_holders(port)) or "another process"
