"""router_svc settings from the environment."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from nrt.settings import Settings


class RouterSettings(Settings):
    """What router_svc reads: the shared settings and its deadlines."""

    classify_timeout: float = Field(
        default=30.0,
        gt=0,
        validation_alias="NRT_ROUTER_CLASSIFY_TIMEOUT",
        description="seconds for the entry model's answer (covers a cold start)",
    )
    manifest_wait: float = Field(
        default=5.0,
        gt=0,
        validation_alias="NRT_ROUTER_MANIFEST_WAIT",
        description="seconds a request may wait for the manifest version it was admitted under to arrive",
    )
    queue: ClassVar[str] = "nrt-router"  # queue group: several router_svc instances share the requests
