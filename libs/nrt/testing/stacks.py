"""What tests of a whole stack share: a home holding the tiny models, the tiny manifest, waiting for a condition."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

TINY_MODELS = ("tiny-llama", "tiny-bert")


def link_tiny_models(home: Path, artifacts: Path) -> Path:
    """``home`` (NRT_HOME) with the tiny artifacts in its ``models/`` as catalogue entries."""
    (home / "models").mkdir(parents=True, exist_ok=True)
    for name in TINY_MODELS:
        (home / "models" / name).symlink_to(artifacts / name)
    return home


def tiny_manifest(cluster: str, legal_tier: str = "standby", replicas: int = 1) -> str:
    """A manifest whose models are all the catalogue's tiny Llama: a router, a resident specialist
    (billing) and ``legal`` in ``legal_tier``, each specialist on ``replicas`` workers.

    The router trusts its best label whatever its odds against "none of these" (threshold 0): the
    tiny random model's labels carry no meaning, and these tests follow a request to a specialist."""
    copies = f", replicas: {replicas}" if replicas != 1 else ""
    return f"""\
cluster: {cluster}
resources: {{gpu_budget: 1GB, ram_budget: 1GB}}
models:
  router: {{source: "catalogue://tiny-llama", tier: resident, priority: critical, confidence_threshold: 0.0}}
  specialists:
    - {{id: billing, source: "catalogue://tiny-llama", tier: resident, co_activation: router{copies}}}
    - {{id: legal, source: "catalogue://tiny-llama", tier: {legal_tier}{copies}}}
routing:
  entry: router
  dispatch_rule: router.output.intent -> specialists.{{intent}}
"""


def eventually(
    check: Callable[[], Any], within: float, what: str, retry_on: tuple[type[Exception], ...] = (OSError,)
) -> Any:
    """``check()``'s first truthy result, polled; ``retry_on`` errors count as "not yet", failed assertions fail."""
    deadline = time.monotonic() + within
    while True:
        error: Exception | None = None
        try:
            result = check()
        except retry_on as exc:
            result, error = None, exc
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {within:g}s (last: {error or result!r})")
        time.sleep(0.3)
