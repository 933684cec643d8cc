"""Manifest problems: each names the file, the key path and the line, and says what is valid."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Problem:
    path: str  # dotted key path, e.g. "models.specialists[1].tier"; "" for the document
    message: str
    line: int | None = None

    def render(self, file: str) -> str:
        where = f"{file}:{self.line}" if self.line is not None else file
        key = f" {self.path}:" if self.path else ""
        return f"{where}:{key} {self.message}"


class ManifestError(Exception):
    """A manifest that cannot be used; carries every problem found, in document order."""

    def __init__(self, file: str, problems: list[Problem]) -> None:
        self.file = file
        self.problems = sorted(problems, key=lambda p: (p.line or 0, p.path))
        super().__init__("\n".join(p.render(file) for p in self.problems))

    def summary(self, file: str | None = None) -> str:
        """Every problem on one line, each naming ``file`` (default: the file it was read as)."""
        problems = [p.render(self.file if file is None else file) for p in self.problems]
        return f"the manifest has {len(problems)} problem(s): " + "; ".join(problems)
