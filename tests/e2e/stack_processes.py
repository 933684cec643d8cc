"""A stack started with `nrt up` as a subprocess, and the processes below it (from /proc)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from nrt.stack.endpoints import Endpoints


@dataclass
class Stack:
    process: subprocess.Popen[bytes]
    endpoints: Endpoints
    data_dir: Path
    log: Path

    @property
    def url(self) -> str:
        return self.endpoints.gateway_url


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: set[int] = set()
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
