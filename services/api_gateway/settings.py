"""api_gateway settings from the environment (one place for every NRT_GATEWAY_* variable)."""

from __future__ import annotations

from pydantic import Field

from nrt.settings import Settings


class GatewaySettings(Settings):
    """What the gateway reads: the shared settings, where it listens, its limits and deadlines."""

    admin_key: str | None = Field(
        default=None, description="bearer token for `PUT /v1/manifest` (swaps are refused when unset)"
    )
    host: str = Field(default="127.0.0.1", validation_alias="NRT_GATEWAY_HOST", description="where the gateway listens")
    port: int = Field(
        default=8080, ge=0, le=65535, validation_alias="NRT_GATEWAY_PORT", description="the gateway's port"
    )
    max_body_bytes: int = Field(
        default=1024 * 1024,
        gt=0,
        validation_alias="NRT_GATEWAY_MAX_BODY_BYTES",
        description="larger request bodies get 413",
    )
    max_tokens_limit: int = Field(
        default=16384,
        gt=0,
        validation_alias="NRT_GATEWAY_MAX_TOKENS",
        description="the largest `max_tokens` a request may ask for",
    )
    max_messages: int = Field(
        default=2048,
        gt=0,
        validation_alias="NRT_GATEWAY_MAX_MESSAGES",
        description="the most messages a chat request may hold",
    )
    route_timeout: float = Field(
        default=30.0,
        gt=0,
        validation_alias="NRT_GATEWAY_ROUTE_TIMEOUT",
        description="seconds to the first frame (the router's decision, or a direct call's first token)",
    )
    idle_timeout: float = Field(
        default=60.0,
        gt=0,
        validation_alias="NRT_GATEWAY_IDLE_TIMEOUT",
        description="seconds between frames (covers a specialist's cold start)",
    )
    request_timeout: float = Field(
        default=600.0, gt=0, validation_alias="NRT_GATEWAY_REQUEST_TIMEOUT", description="seconds for a whole request"
    )
    apply_timeout: float = Field(
        default=300.0,
        gt=0,
        validation_alias="NRT_GATEWAY_APPLY_TIMEOUT",
        description="seconds for a manifest swap, on top of its drain timeout",
    )
