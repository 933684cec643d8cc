"""A model's scores for the labels it may choose from, and how sure it is of the best one."""

from __future__ import annotations

import msgspec


class Scored(msgspec.Struct, frozen=True, kw_only=True):
    """Label scores restricted to the manifest's labels, the best of them and how sure it is."""

    scores: dict[str, float]
    best: str | None  # None: no allowed label was scored
    confidence: float  # in [0, 1]
