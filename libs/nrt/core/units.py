"""Parsing and formatting of the manifest's sizes (``18GB``, ``1.5GiB``) and durations (``30s``)."""

from __future__ import annotations

import re

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*$", re.IGNORECASE)
_SIZE_FACTORS: dict[str, int] = {
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}
SIZE_HINT = "a size such as 512MB, 18GB or 1.5GiB (units B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_DURATION_FACTORS: dict[str, float] = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
DURATION_HINT = "a duration such as 250ms, 30s, 5m or 1h"


def parse_size(value: str | int) -> int:
    """Bytes in a size; a bare integer is bytes. Raises ValueError naming what is valid."""
    if isinstance(value, bool):
        raise ValueError(f"expected {SIZE_HINT}, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"a size cannot be negative, got {value}")
        return value
    match = _SIZE.match(value)
    if match is None:
        raise ValueError(f"expected {SIZE_HINT}, got {value!r}")
    number, unit = match.groups()
    return int(float(number) * _SIZE_FACTORS[(unit or "B").upper()])


def parse_duration(value: str | int | float) -> float:
    """Seconds in a duration; a bare number is seconds. Raises ValueError naming what is valid."""
    if isinstance(value, bool):
        raise ValueError(f"expected {DURATION_HINT}, got {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"a duration cannot be negative, got {value}")
        return float(value)
    match = _DURATION.match(value)
    if match is None:
        raise ValueError(f"expected {DURATION_HINT}, got {value!r}")
    number, unit = match.groups()
    return float(number) * _DURATION_FACTORS[unit or "s"]


def format_size(n_bytes: int) -> str:
    """Human-readable decimal size: 1.5 GB, 512 MB, 900 B."""
    for unit, factor in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if n_bytes >= factor:
            return f"{n_bytes / factor:.3g} {unit}"
    return f"{n_bytes} B"
