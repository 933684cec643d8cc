"""Text-level stop sequences for a streamed generation.

Text that could be the beginning of a stop sequence is held back until it either
completes the stop (generation ends and the stop text is never emitted) or stops
matching (it is released). The held text is always a suffix of the generated text
that is a proper prefix of some stop sequence, so searching it is enough.
"""

from __future__ import annotations

from collections.abc import Sequence


class StopMatcher:
    """Filter text deltas through a set of stop sequences."""

    __slots__ = ("_held", "_stops", "matched", "stopped")

    def __init__(self, stops: Sequence[str]) -> None:
        self._stops = tuple(dict.fromkeys(s for s in stops if s))
        self._held = ""
        self.stopped = False
        self.matched: str | None = None  # the stop sequence that ended the text, once one did

    @property
    def active(self) -> bool:
        return bool(self._stops)

    def feed(self, delta: str) -> str:
        """Add generated text; return what may be emitted now. Sets ``stopped`` on a match."""
        if not self._stops:
            return delta
        if self.stopped or not delta:
            return ""
        text = self._held + delta
        cut = -1
        for stop in self._stops:
            found = text.find(stop)
            if found != -1 and (cut == -1 or found < cut):
                cut, self.matched = found, stop
        if cut != -1:
            self.stopped = True
            self._held = ""
            return text[:cut]
        hold = self._partial_suffix(text)
        self._held = text[len(text) - hold :] if hold else ""
        return text[: len(text) - hold]

    def flush(self) -> str:
        """At a non-stop finish: release whatever was held back."""
        held, self._held = self._held, ""
        return "" if self.stopped else held

    def _partial_suffix(self, text: str) -> int:
        """Length of the longest suffix of ``text`` that is a proper prefix of a stop."""
        best = 0
        for stop in self._stops:
            for length in range(min(len(stop) - 1, len(text)), best, -1):
                if text.endswith(stop[:length]):
                    best = length
                    break
        return best
