"""The processes below a process, from /proc (Linux): what a test of real processes looks at and signals."""

from __future__ import annotations

from pathlib import Path


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid``."""
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
    """Running, or stopped, but not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def command_line(pid: int) -> list[str]:
    try:
        return [
            part.decode(errors="replace") for part in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if part
        ]
    except OSError:
        return []


def executable_name(pid: int) -> str:
    """The process' name as the kernel knows it (``/proc/PID/comm``), e.g. ``postgres`` or ``nats-server``."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def python_services(root: int, names: tuple[str, ...]) -> dict[str, int]:
    """The pid of each ``python -m NAME`` process below ``root``, by NAME."""
    found: dict[str, int] = {}
    for pid in descendants(root):
        argv = command_line(pid)
        for name in names:
            if "-m" in argv and name in argv and alive(pid):
                found[name] = pid
    return found
