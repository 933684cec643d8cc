from __future__ import annotations

import pytest

from nrt.core.units import format_size, parse_duration, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [("18GB", 18 * 10**9), ("512MB", 512 * 10**6), ("1.5GiB", int(1.5 * 2**30)), ("100", 100), (7, 7), ("2 kib", 2048)],
)
def test_parse_size(text: str | int, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["", "GB", "-1GB", "1.2.3MB", "12 parsecs", True])
def test_parse_size_rejects(bad: str | bool) -> None:
    with pytest.raises(ValueError, match="expected a size"):
        parse_size(bad)


@pytest.mark.parametrize(
    ("text", "expected"), [("250ms", 0.25), ("30s", 30.0), ("5m", 300.0), ("1h", 3600.0), (2, 2.0)]
)
def test_parse_duration(text: str | int, expected: float) -> None:
    assert parse_duration(text) == expected


def test_format_size() -> None:
    assert format_size(1_500_000_000) == "1.5 GB"
    assert format_size(999) == "999 B"
