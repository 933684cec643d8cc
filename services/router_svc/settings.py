"""router_svc settings from the environment."""

from __future__ import annotations

import os
from dataclasses import dataclass


def _seconds(name: str, default: float) -> float:
    raw = os.environ.get(name)
    return float(raw) if raw else default


CLASSIFY_TIMEOUT = 30.0
MANIFEST_WAIT = 5.0


@dataclass(frozen=True, slots=True)
class RouterSettings:
    classify_timeout: float = CLASSIFY_TIMEOUT  # deadline for the entry model's answer (covers a cold start)
    manifest_wait: float = MANIFEST_WAIT  # how long a request may wait for its manifest version to arrive
    queue: str = "nrt-router"  # queue group: several router_svc instances share the requests

    @classmethod
    def from_env(cls) -> RouterSettings:
        return cls(
            classify_timeout=_seconds("NRT_ROUTER_CLASSIFY_TIMEOUT", CLASSIFY_TIMEOUT),
            manifest_wait=_seconds("NRT_ROUTER_MANIFEST_WAIT", MANIFEST_WAIT),
        )
