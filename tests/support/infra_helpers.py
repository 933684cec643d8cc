"""Process checks shared by the infrastructure tests."""

from __future__ import annotations

from typing import TYPE_CHECKING

import psutil

if TYPE_CHECKING:
    from collections.abc import Iterable


def process_gone(pid: int) -> bool:
    """True when ``pid`` no longer runs (an unreaped zombie counts as gone)."""
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def assert_all_gone(pids: Iterable[int]) -> None:
    alive = [pid for pid in pids if not process_gone(pid)]
    assert not alive, f"processes left behind: {alive}"


def process_tree(pid: int) -> list[int]:
    """``pid`` and all its descendants."""
    return [pid, *(child.pid for child in psutil.Process(pid).children(recursive=True))]
