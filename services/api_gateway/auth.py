"""Who may call: every ``/v1`` route is guarded by an API key of the scope it needs, and the key's rate limits.

The key comes as ``Authorization: Bearer <key>`` (what the OpenAI clients send) or as an
``x-api-key`` header; it is checked against the keys the gateway folded from the event log
(``ApiKeyCreated`` / ``ApiKeyRevoked``), by hash. A missing, unknown or revoked key is a 401,
a key of too small a scope a 403, a key over its limits a 429 with ``Retry-After`` (the limits hold across every gateway:
``api_gateway.shared_limits``; a 503 when they cannot be checked), all in the
OpenAI error shape. ``NRT_AUTH=off`` lets every request through (local experiments only).
The guard hashes the key once and leaves the :class:`Caller` it found in the request's state,
where the handlers read it (:func:`caller`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from litestar.connection import ASGIConnection
from litestar.datastructures import Headers
from litestar.handlers import BaseRouteHandler

from api_gateway.errors import ApiError
from api_gateway.shared_limits import LimitsUnavailable
from nrt.core.api_keys import allows, find_key, key_id_of, key_sha256
from nrt.core.vocabulary import KeyScope

if TYPE_CHECKING:
    from api_gateway.cluster_link import ClusterLink

CHALLENGE = {"WWW-Authenticate": "Bearer"}
CALLER_STATE = "nrt_caller"  # the request-state key the guards leave the Caller under


@dataclass(frozen=True)
class Caller:
    """Who a request that passed its guard comes from."""

    key_id: str | None  # the key its usage is recorded for (with NRT_AUTH=off: the presented key's, if any)
    admin: bool  # whether it may see what only admins may (every caller, with NRT_AUTH=off)


def presented_key(headers: Headers) -> str | None:
    """The key a request carries (``Authorization: Bearer``, else ``x-api-key``), or None."""
    scheme, _, token = (headers.get("authorization") or "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    other = (headers.get("x-api-key") or "").strip()
    return other or None


async def authorize(cluster_link: ClusterLink, headers: Headers, needed: KeyScope) -> Caller:
    """The caller of a request with ``headers``; raises the ApiError it gets unless its key may do
    what needs ``needed`` now."""
    token = presented_key(headers)
    if not cluster_link.settings.auth:
        return Caller(key_id=key_id_of(key_sha256(token)) if token is not None else None, admin=True)
    if token is None:
        raise ApiError(
            401,
            "no API key: send 'Authorization: Bearer <key>' (or an 'x-api-key' header); "
            "`nrt up` prints its keys, `nrt keys create` makes more",
            code="invalid_api_key",
            headers=CHALLENGE,
        )
    bus = cluster_link.require()
    key = find_key(bus.follower.state.api_keys, token)
    if key is None:
        raise ApiError(401, "the API key is not valid (unknown or revoked)", code="invalid_api_key", headers=CHALLENGE)
    if not allows(key, needed):
        raise ApiError(
            403,
            f"this needs an {needed} key; key {key.key_id} ({key.name}) has scope {key.scope}",
            code="insufficient_scope",
        )
    try:
        refusal = await bus.limiter.admit(key)
    except LimitsUnavailable as exc:
        raise ApiError(
            503, f"key {key.key_id}'s rate limits cannot be checked: {exc}", code="rate_limits_unavailable"
        ) from None
    if refusal is not None:
        raise ApiError(
            429,
            f"key {key.key_id} is over its limit of {refusal.allowed:g} {refusal.limit}; "
            f"retry in {refusal.retry_after}s",
            code="rate_limit_exceeded",
            headers={"Retry-After": str(refusal.retry_after)},
        )
    return Caller(key_id=key.key_id, admin=key.scope == KeyScope.ADMIN)


def caller(connection: ASGIConnection[Any, Any, Any, Any]) -> Caller:
    """The caller the route's guard (``infer_key`` / ``admin_key``) found."""
    found: Caller = connection.state[CALLER_STATE]
    return found


async def _guard(connection: ASGIConnection[Any, Any, Any, Any], needed: KeyScope) -> None:
    cluster_link: ClusterLink = connection.app.state.cluster_link
    connection.state[CALLER_STATE] = await authorize(cluster_link, connection.headers, needed)


async def infer_key(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Guard: an ``infer`` (or ``admin``) key, within its limits."""
    await _guard(connection, KeyScope.INFER)


async def admin_key(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Guard: an ``admin`` key, within its limits (checked before the body is read)."""
    await _guard(connection, KeyScope.ADMIN)
