"""Local TCP port helpers."""

from __future__ import annotations

import socket
import time

from nrt.infra.errors import PortTimeoutError

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
