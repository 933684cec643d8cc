"""How a long build reports which step it is on (the CLI draws a progress bar from it)."""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    """Receives the name of each build step as it starts."""

    def step(self, description: str) -> None: ...


class NoProgress:
    """Discards step reports."""

    def step(self, description: str) -> None:
        return None


class StepLog:
    """Remembers the steps reported, in order (for tests and logs)."""

    def __init__(self) -> None:
        self.steps: list[str] = []

    def step(self, description: str) -> None:
        self.steps.append(description)
