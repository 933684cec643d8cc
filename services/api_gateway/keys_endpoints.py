"""``/v1/keys`` (admin): make, list and revoke API keys.

The gateway makes a new key and sends only its hash to cluster_state (``nrt.keys.create``),
which records ``ApiKeyCreated``; the key is in the answer, this once. Each change answers
once the gateway's own fold holds it, so a new key works, and a revoked one is refused,
from the next request on.
"""

from __future__ import annotations

from typing import Any

from litestar import Request, delete, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody
from msgspec.structs import asdict

from api_gateway.auth import admin_key, caller
from api_gateway.cluster_link import ClusterLink
from api_gateway.errors import ApiError
from api_gateway.openai_types import KeyCreated, KeyCreateRequest, KeyInfo, KeyList, KeyUsageInfo
from api_gateway.openapi_docs import KEYED, errors, options_handler
from nrt.adapters.bus import subjects
from nrt.adapters.bus.broker import call
from nrt.adapters.bus.errors import RemoteError
from nrt.core.api_keys import generate_key, key_sha256
from nrt.core.protocol import CreateKey, RevokeKey, StateQuery
from nrt.core.state import ApiKey, ClusterState
from nrt.core.vocabulary import KeyScope

KEYS_TIMEOUT = 10.0  # for cluster_state to record a change, and for this gateway to fold it


def key_info(key: ApiKey, with_usage: bool = True) -> KeyInfo:
    return KeyInfo(
        key_id=key.key_id,
        name=key.name,
        scope=key.scope.value,
        rps=key.rps,
        tokens_per_min=key.tokens_per_min,
        created_at=key.created_at,
        created_by=key.created_by,
        revoked_at=key.revoked_at,
        usage=_usage(key) if with_usage else None,
    )


def _usage(key: ApiKey) -> KeyUsageInfo:
    u = key.usage
    return KeyUsageInfo(
        requests=u.requests,
        completed=u.completed,
        failed=u.failed,
        prompt_tokens=u.prompt_tokens,
        completion_tokens=u.completion_tokens,
        last_used_at=u.last_used_at,
    )


@post(
    "/v1/keys",
    guards=[admin_key],
    status_code=201,
    responses=errors(400, *KEYED, 502, 503, 504),
    summary="Create an API key (admin): the key is in this answer only; the log keeps its hash",
)
async def create_key(
    data: JSONBody[KeyCreateRequest], request: Request[Any, Any, Any], cluster_link: NamedDependency[ClusterLink]
) -> KeyCreated:
    bus = cluster_link.require()
    key = generate_key()
    digest = key_sha256(key)
    asked = CreateKey(
        name=data.name,
        scope=KeyScope(data.scope),
        key_sha256=digest,
        rps=data.rps,
        tokens_per_min=data.tokens_per_min,
        created_by=caller(request).key_id,
    )
    try:
        created = await call(bus.broker, subjects.KEYS_CREATE, asked, ApiKey, KEYS_TIMEOUT)
        await bus.follower.wait_for(lambda s: created.key_id in s.api_keys, within=KEYS_TIMEOUT)
    except RemoteError as exc:
        raise ApiError.from_remote(exc) from None
    except TimeoutError:
        raise _not_folded(created.key_id) from None
    return KeyCreated(key=key, **asdict(key_info(created, with_usage=False)))


@get(
    "/v1/keys",
    guards=[admin_key],
    responses=errors(*KEYED, 503),
    summary="Every API key (admin): ids, names, scopes, limits, usage; never a key",
)
async def list_keys(cluster_link: NamedDependency[ClusterLink]) -> KeyList:
    bus = cluster_link.require()
    try:  # cluster_state's fold counts each key's usage; the gateway's own follows no requests
        state = await call(bus.broker, subjects.STATE, StateQuery(), ClusterState, timeout=KEYS_TIMEOUT)
        with_usage = True
    except RemoteError:
        state, with_usage = bus.follower.state, False
    keys = sorted(state.api_keys.values(), key=lambda k: (k.created_at, k.key_id))
    return KeyList(data=[key_info(k, with_usage) for k in keys])


@delete(
    "/v1/keys/{key_id:str}",
    guards=[admin_key],
    status_code=200,
    responses=errors(400, *KEYED, 404, 409, 502, 503, 504),
    summary="Revoke an API key (admin): refused from the next request on",
)
async def revoke_key(
    key_id: FromPath[str], request: Request[Any, Any, Any], cluster_link: NamedDependency[ClusterLink]
) -> KeyInfo:
    bus = cluster_link.require()
    asked = RevokeKey(key_id=key_id, revoked_by=caller(request).key_id)
    try:
        revoked = await call(bus.broker, subjects.KEYS_REVOKE, asked, ApiKey, KEYS_TIMEOUT)
        await bus.follower.wait_for(
            lambda s: (k := s.api_keys.get(key_id)) is not None and not k.live, within=KEYS_TIMEOUT
        )
    except RemoteError as exc:
        raise ApiError.from_remote(exc) from None
    except TimeoutError:
        raise _not_folded(key_id) from None
    return key_info(revoked, with_usage=False)


def _not_folded(key_id: str) -> ApiError:
    return ApiError(
        504,
        f"cluster_state recorded the change of key {key_id}, but this gateway has not seen it within "
        f"{KEYS_TIMEOUT:g}s; it applies once it does",
        code="deadline_exceeded",
    )


keys_options = options_handler("/v1/keys", create_key, list_keys)
