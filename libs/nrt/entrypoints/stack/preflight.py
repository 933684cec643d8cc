"""Before `nrt up` starts anything: its data directory and its gateway port must be its own.

A second `nrt up` on the same data directory, or on a port another process listens on, is
refused at once with a message naming what holds it, instead of starting beside it and
letting its clients talk to the other stack.

The lock file names the pid of the `nrt up` that owns the directory, written once the directory
and the port are both its own and cleared when it lets go; a refused run leaves it as it was.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from nrt.adapters.infra.ports import held_by
from nrt.entrypoints.stack import endpoints

LOCK_FILE = "nrt-up.lock"


class StackInUseError(Exception):
    """The data directory or the gateway port belongs to something else; the message says what."""


def lock_data_dir(data_dir: Path) -> int:
    """Hold ``data_dir``'s lock for as long as the returned descriptor is open (close it to release).

    Writes nothing: :func:`claimed` names its owner once the claim is complete. Raises
    :class:`StackInUseError` when another `nrt up` holds it.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        running = endpoints.discover(data_dir)
        where = f", serving {running.gateway_url}" if running is not None else ""
        raise StackInUseError(
            f"another `nrt up` (pid {holder}{where}) runs on data directory {data_dir}; stop it first "
            "(Ctrl-C in its terminal), or give this one another --data-dir"
        ) from None
    return fd


def _name_owner(fd: int, pid: int | None) -> None:
    """The lock file says ``pid`` owns the directory (None: nobody)."""
    os.ftruncate(fd, 0)
    if pid is not None:
        os.pwrite(fd, f"{pid}\n".encode(), 0)


def require_free_port(host: str, port: int) -> None:
    """Raise :class:`StackInUseError` unless ``host:port`` can be bound now; it names what holds it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port in TIME_WAIT is free
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise StackInUseError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
            raise StackInUseError(
                f"port {port} on {host} is taken by {held_by(port)} (another stack?); stop it or choose "
                "another port with --port"
            ) from None


@contextlib.contextmanager
def claimed(data_dir: Path, host: str, port: int) -> Iterator[None]:
    """The data directory locked, the port checked, and the lock file naming this process, for the
    duration of the block."""
    fd = lock_data_dir(data_dir)
    try:
        require_free_port(host, port)
        _name_owner(fd, os.getpid())
        try:
            yield
        finally:
            _name_owner(fd, None)
    finally:
        os.close(fd)
