"""Where a running stack can be reached, recorded in its data directory for client commands."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from nrt.adapters.settings import nrt_home

ENDPOINTS_FILE = "endpoints.json"


class Endpoints(msgspec.Struct, frozen=True, kw_only=True):
    nats_url: str
    database_url: str
    gateway_url: str
    pid: int  # the `nrt up` process
    metrics: dict[str, str] = {}  # service -> its Prometheus metrics URL (absent from files of older stacks)


def stack_dir() -> Path:
    return nrt_home() / "stack"


def write(endpoints: Endpoints, directory: Path | None = None) -> Path:
    path = (directory or stack_dir()) / ENDPOINTS_FILE
    # owner-only: the database URL carries the services' PostgreSQL password
    write_private(path, msgspec.json.encode(endpoints))
    return path


def write_private(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` at once, in a file only this user can read (mode 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.chmod(tmp, 0o600)  # whatever the umask
    tmp.replace(path)


def remove(directory: Path | None = None) -> None:
    ((directory or stack_dir()) / ENDPOINTS_FILE).unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def discover(directory: Path | None = None) -> Endpoints | None:
    """The endpoints of a stack started by `nrt up` on this machine, if one is running."""
    path = (directory or stack_dir()) / ENDPOINTS_FILE
    try:
        endpoints = msgspec.json.decode(path.read_bytes(), type=Endpoints)
    except (OSError, msgspec.DecodeError):
        return None
    return endpoints if _alive(endpoints.pid) else None
