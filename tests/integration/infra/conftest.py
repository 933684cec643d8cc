"""Start-up timing report for the infrastructure tests."""

from __future__ import annotations

import pytest

_TIMINGS: list[tuple[str, float]] = []


@pytest.fixture
def record_timing() -> list[tuple[str, float]]:
    """Append (label, seconds) to have it printed in the terminal summary."""
    return _TIMINGS


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _TIMINGS:
        terminalreporter.section("infra start-up times")
        for label, seconds in _TIMINGS:
            terminalreporter.write_line(f"{label:<55} {seconds * 1000:8.0f} ms")
