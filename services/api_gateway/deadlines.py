"""How long the gateway waits for a request's next frame: pure arithmetic on its settings.

Before any frame: ``route_timeout`` (router_svc's decision, or the worker taking a direct
call). Once a worker has taken the request (its ``Accepted`` frame) and before the first
token: ``first_token_timeout``, the allowance for a cold start and a wait for a batch row.
Between tokens: a multiple of the model's measured time per token on that worker, never
less than ``token_timeout_floor`` nor more than ``idle_timeout`` (which applies as such
while the speed is not measured yet). A lost worker does not wait any of these out: the
gateway ends its requests when the event log says it is lost.
"""

from __future__ import annotations

from api_gateway.settings import GatewaySettings


def inter_token_timeout(tokens_per_s: float | None, settings: GatewaySettings) -> float:
    """Seconds to wait for the next token from a model decoding at ``tokens_per_s`` (None: not measured)."""
    if tokens_per_s is None or tokens_per_s <= 0:
        return settings.idle_timeout
    scaled = settings.token_timeout_factor / tokens_per_s
    return min(settings.idle_timeout, max(settings.token_timeout_floor, scaled))


def next_frame_timeout(
    settings: GatewaySettings, *, accepted: bool, chunks: int, tokens_per_s: float | None
) -> tuple[float, str]:
    """(seconds to wait for the next frame, what that frame is, for the error message)."""
    if chunks > 0:
        return inter_token_timeout(tokens_per_s, settings), "next token"
    if accepted:
        return settings.first_token_timeout, "first token"
    return settings.route_timeout, "first reply"
