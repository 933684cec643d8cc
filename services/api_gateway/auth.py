"""Who may call: every ``/v1`` route is guarded by an API key of the scope it needs, and the key's rate limits.

The key comes as ``Authorization: Bearer <key>`` (what the OpenAI clients send) or as an
``x-api-key`` header; it is checked against the keys the gateway folded from the event log
(``ApiKeyCreated`` / ``ApiKeyRevoked``), by hash. A missing, unknown or revoked key is a 401,
a key of too small a scope a 403, a key over its limits a 429 with ``Retry-After``, all in the
OpenAI error shape. ``NRT_AUTH=off`` lets every request through (local experiments only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from litestar.connection import ASGIConnection
from litestar.datastructures import Headers
from litestar.handlers import BaseRouteHandler

from api_gateway.errors import ApiError
from nrt.keys import allows, find_key, key_id_of, key_sha256
from nrt.vocabulary import KeyScope

if TYPE_CHECKING:
    from api_gateway.runtime import Runtime

CHALLENGE = {"WWW-Authenticate": "Bearer"}


def presented_key(headers: Headers) -> str | None:
    """The key a request carries (``Authorization: Bearer``, else ``x-api-key``), or None."""
    scheme, _, token = (headers.get("authorization") or "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    other = (headers.get("x-api-key") or "").strip()
    return other or None


def caller_key_id(headers: Headers) -> str | None:
    """The key id of the key a request carries (recorded with its usage), or None."""
    key = presented_key(headers)
    return key_id_of(key_sha256(key)) if key is not None else None


def authorize(runtime: Runtime, headers: Headers, needed: KeyScope) -> None:
    """Raise the ApiError a request with ``headers`` gets, unless its key may do what needs ``needed`` now."""
    if not runtime.settings.auth:
        return
    token = presented_key(headers)
    if token is None:
        raise ApiError(
            401,
            "no API key: send 'Authorization: Bearer <key>' (or an 'x-api-key' header); "
            "`nrt up` prints its keys, `nrt keys create` makes more",
            code="invalid_api_key",
            headers=CHALLENGE,
        )
    key = find_key(runtime.require().follower.state.api_keys, token)
    if key is None:
        raise ApiError(401, "the API key is not valid (unknown or revoked)", code="invalid_api_key", headers=CHALLENGE)
    if not allows(key, needed):
        raise ApiError(
            403,
            f"this needs an {needed} key; key {key.key_id} ({key.name}) has scope {key.scope}",
            code="insufficient_scope",
        )
    refusal = runtime.limiter.admit(key)
    if refusal is not None:
        raise ApiError(
            429,
            f"key {key.key_id} is over its limit of {refusal.allowed:g} {refusal.limit}; "
            f"retry in {refusal.retry_after}s",
            code="rate_limit_exceeded",
            headers={"Retry-After": str(refusal.retry_after)},
        )


def is_admin(runtime: Runtime, headers: Headers) -> bool:
    """Whether a request with ``headers`` carries a live admin key (every request is, with NRT_AUTH=off)."""
    if not runtime.settings.auth:
        return True
    token, bus = presented_key(headers), runtime.bus
    key = find_key(bus.follower.state.api_keys, token) if token is not None and bus is not None else None
    return key is not None and key.scope == KeyScope.ADMIN


def _runtime(connection: ASGIConnection[Any, Any, Any, Any]) -> Runtime:
    runtime: Runtime = connection.app.state.runtime
    return runtime


def infer_key(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Guard: an ``infer`` (or ``admin``) key, within its limits."""
    authorize(_runtime(connection), connection.headers, KeyScope.INFER)


def admin_key(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Guard: an ``admin`` key, within its limits (checked before the body is read)."""
    authorize(_runtime(connection), connection.headers, KeyScope.ADMIN)
