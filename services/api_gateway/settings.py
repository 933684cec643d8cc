"""api_gateway settings from the environment (one place for every NRT_GATEWAY_* variable)."""

from __future__ import annotations

import os
from dataclasses import dataclass

DEFAULT_NATS_URL = "nats://127.0.0.1:4222"


def _number(name: str, default: float) -> float:
    raw = os.environ.get(name)
    return float(raw) if raw else default


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    nats_url: str = DEFAULT_NATS_URL
    admin_key: str | None = None  # PUT /v1/manifest needs it as a bearer token; unset: updates disabled
    max_body_bytes: int = 1024 * 1024  # larger request bodies get 413
    max_tokens_limit: int = 16384  # the largest max_tokens a request may ask for
    route_timeout: float = 30.0  # deadline for the first frame (the router's decision or a direct call's first token)
    idle_timeout: float = 60.0  # deadline between frames (covers a specialist's cold start)
    request_timeout: float = 600.0  # deadline for a whole request
    apply_timeout: float = 300.0  # deadline for a manifest swap, on top of its drain timeout

    @classmethod
    def from_env(cls) -> GatewaySettings:
        default = cls()
        return cls(
            nats_url=os.environ.get("NRT_NATS_URL") or DEFAULT_NATS_URL,
            admin_key=os.environ.get("NRT_ADMIN_KEY") or None,
            max_body_bytes=int(_number("NRT_GATEWAY_MAX_BODY_BYTES", default.max_body_bytes)),
            max_tokens_limit=int(_number("NRT_GATEWAY_MAX_TOKENS", default.max_tokens_limit)),
            route_timeout=_number("NRT_GATEWAY_ROUTE_TIMEOUT", default.route_timeout),
            idle_timeout=_number("NRT_GATEWAY_IDLE_TIMEOUT", default.idle_timeout),
            request_timeout=_number("NRT_GATEWAY_REQUEST_TIMEOUT", default.request_timeout),
            apply_timeout=_number("NRT_GATEWAY_APPLY_TIMEOUT", default.apply_timeout),
        )
