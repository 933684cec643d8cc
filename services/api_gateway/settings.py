"""api_gateway settings from the environment (one place for every NRT_GATEWAY_* variable)."""

from __future__ import annotations

from pydantic import Field

from nrt.adapters.settings import HeartbeatSettings


class GatewaySettings(HeartbeatSettings):
    """What the gateway reads: the shared settings and the heartbeat, where it listens, its limits and deadlines."""

    auth: bool = Field(
        default=True,
        validation_alias="NRT_AUTH",
        description="`off`: no API key is needed (local experiments only; the gateway warns at start)",
        json_schema_extra={"default_text": "`on`"},
    )
    host: str = Field(default="127.0.0.1", validation_alias="NRT_GATEWAY_HOST", description="where the gateway listens")
    port: int = Field(
        default=8080, ge=0, le=65535, validation_alias="NRT_GATEWAY_PORT", description="the gateway's port"
    )
    instance: str | None = Field(
        default=None,
        validation_alias="NRT_GATEWAY_INSTANCE",
        description="an id `/readyz` reports, so that a launcher knows it reached its own gateway (set by `nrt up`)",
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
        description="the most seconds between tokens (and the wait while the model's speed is not measured yet)",
    )
    first_token_timeout: float = Field(
        default=60.0,
        gt=0,
        validation_alias="NRT_GATEWAY_FIRST_TOKEN_TIMEOUT",
        description="seconds from a worker taking a request to its first token (covers a cold start)",
    )
    token_timeout_factor: float = Field(
        default=50.0,
        gt=0,
        validation_alias="NRT_GATEWAY_TOKEN_TIMEOUT_FACTOR",
        description="the wait between tokens, in the model's measured times per token on its worker",
    )
    token_timeout_floor: float = Field(
        default=5.0,
        gt=0,
        validation_alias="NRT_GATEWAY_TOKEN_TIMEOUT_FLOOR",
        description="the least seconds to wait between tokens, however fast the model",
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
    rate_lease_share: float = Field(
        default=0.1,
        gt=0,
        le=1,
        validation_alias="NRT_GATEWAY_RATE_LEASE_SHARE",
        description="the share of a key's request burst (`max(1, rps)`) a gateway takes from the cluster-wide bucket "
        "at once and admits without asking again; the cluster may admit up to that many requests (less one) per "
        "gateway beyond a key's limit",
    )
    rate_lease_s: float = Field(
        default=1.0,
        gt=0,
        validation_alias="NRT_GATEWAY_RATE_LEASE_S",
        description="seconds a gateway spends a leased batch of a key's requests (and trusts its view of the key's "
        "token bucket) before it asks the cluster-wide bucket again",
    )
