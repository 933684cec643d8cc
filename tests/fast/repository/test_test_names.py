"""Every test module has a basename of its own: pytest imports test files by basename (no packages under tests/),
so two files of one name in two folders stop the whole run at collection."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]


def test_no_two_test_modules_share_a_basename() -> None:
    folders: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        folders[path.name].append(str(path.parent.relative_to(TESTS)))
    shared = {name: where for name, where in folders.items() if len(where) > 1}
    assert not shared, f"test modules of one name in several folders: {shared}"
