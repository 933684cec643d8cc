"""The dispatch rule grammar: ``<entry>.output.intent -> specialists.{intent}`` or ``-> specialists.<id>``."""

from __future__ import annotations

import re
from dataclasses import dataclass

_RULE = re.compile(
    r"^\s*(?P<source>[A-Za-z0-9_-]+)\.output\.intent\s*->\s*(?P<set>[A-Za-z0-9_-]+)\.(?P<target>\{intent\}|[A-Za-z0-9_-]+)\s*$"
)
RULE_HINT = (
    "'<entry>.output.intent -> specialists.{intent}' (dispatch on the intent) "
    "or '<entry>.output.intent -> specialists.<id>' (a fixed route)"
)
DISPATCH_SETS = ("specialists",)


@dataclass(frozen=True, slots=True)
class DispatchRule:
    source: str  # the model whose output.intent is read (the entry model)
    target_set: str  # "specialists"
    fixed_target: str | None  # a specialist id for a fixed route; None for intent dispatch

    @property
    def by_intent(self) -> bool:
        return self.fixed_target is None

    def render(self) -> str:
        target = self.fixed_target if self.fixed_target is not None else "{intent}"
        return f"{self.source}.output.intent -> {self.target_set}.{target}"


def parse_rule(text: str) -> DispatchRule:
    """Parse a dispatch rule; raises ValueError saying what the grammar accepts."""
    match = _RULE.match(text)
    if match is None:
        raise ValueError(f"malformed dispatch rule {text!r}; expected {RULE_HINT}")
    target = match["target"]
    return DispatchRule(match["source"], match["set"], None if target == "{intent}" else target)
