"""router_svc settings from the environment (every NRT_ROUTER_* variable)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, field_validator

from nrt.adapters.settings import HeartbeatSettings
from nrt.core.units import parse_size


class RouterSettings(HeartbeatSettings):
    """What router_svc reads: the shared settings, the heartbeat, its deadlines, and its router host's
    identity and capacity (router_svc hosts the entry model: it is that model's worker)."""

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
    router_worker_id: str | None = Field(
        default=None,
        description="the worker id this router_svc instance hosts the entry model under",
        json_schema_extra={"default_text": "`router-`, the host name and a random suffix"},
    )
    router_ram: int | None = Field(
        default=None,
        description="the memory router_svc offers for the entry model (`2GB`)",
        json_schema_extra={"default_text": "the host's memory"},
    )
    router_max_batch: int = Field(
        default=16,
        ge=1,
        description="how many requests a generative entry model runs in one batch (when it answers itself)",
    )
    router_ort_threads: int | None = Field(
        default=None,
        ge=1,
        description="ONNX Runtime intra-op threads for the entry model's session (`1` suits a small router on a "
        "host shared with the other services)",
        json_schema_extra={"default_text": "ONNX Runtime's: one per core"},
    )
    queue: ClassVar[str] = "nrt-router"  # queue group: several router_svc instances share the requests

    @field_validator("router_ram", mode="before")
    @classmethod
    def _size(cls, value: object) -> object:
        return parse_size(value) if isinstance(value, str) else value
