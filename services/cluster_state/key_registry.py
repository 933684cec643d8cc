"""API keys in the log: record a new one, revoke one, and make sure the keys given at start exist.

cluster_state is the only writer of ``ApiKeyCreated`` / ``ApiKeyRevoked``: it checks a
change against the folded state (a key id names one key; the last live admin key stays),
publishes the event and answers once its own fold holds it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from cluster_state.controller import Controller
from nrt.adapters.bus.errors import BadRequest, RemoteError
from nrt.core.api_keys import bootstrap_event, key_id_of, live_admin_keys
from nrt.core.events import ApiKeyCreated, ApiKeyRevoked
from nrt.core.protocol import CreateKey, RevokeKey
from nrt.core.state import ApiKey, ClusterState
from nrt.core.vocabulary import KeyScope

log = logging.getLogger("nrt.cluster_state")

FOLD_WITHIN = 10.0
MAX_NAME = 100
HEX = frozenset("0123456789abcdef")


async def create_key(controller: Controller, request: CreateKey) -> ApiKey:
    """Record ``request`` as ``ApiKeyCreated`` and answer the folded key."""
    name = request.name.strip()
    if not name or len(name) > MAX_NAME:
        raise BadRequest(f"a key's name must be 1 to {MAX_NAME} characters", code="invalid_key_name")
    if len(request.key_sha256) != 64 or not HEX.issuperset(request.key_sha256):
        raise BadRequest("key_sha256 must be 64 lowercase hex digits", code="invalid_key_hash")
    if request.rps is not None and request.rps <= 0:
        raise BadRequest("rps must be greater than 0", code="invalid_limit")
    if request.tokens_per_min is not None and request.tokens_per_min <= 0:
        raise BadRequest("tokens_per_min must be greater than 0", code="invalid_limit")
    key_id = key_id_of(request.key_sha256)
    if key_id in controller.cluster.api_keys:
        raise RemoteError("key_exists", f"a key with id {key_id} exists already; make another key", 409)
    event = ApiKeyCreated(
        key_id=key_id,
        name=name,
        scope=request.scope,
        key_sha256=request.key_sha256,
        rps=request.rps,
        tokens_per_min=request.tokens_per_min,
        created_by=request.created_by,
    )
    await controller.decide([event])
    state = await controller.wait_for(_holds(key_id), within=FOLD_WITHIN)
    log.info("API key %s (%s, %s) created", key_id, name, request.scope)
    return state.api_keys[key_id]


async def revoke_key(controller: Controller, request: RevokeKey) -> ApiKey:
    """Record ``ApiKeyRevoked`` for a live key and answer the folded, revoked key."""
    key = controller.cluster.api_keys.get(request.key_id)
    if key is None:
        raise RemoteError("key_not_found", f"no API key has id {request.key_id!r}", 404)
    if not key.live:
        return key  # revoked already: nothing to record
    if key.scope == KeyScope.ADMIN and len(live_admin_keys(controller.cluster)) == 1:
        raise RemoteError(
            "last_admin_key", f"{request.key_id} is the last live admin key: create another admin key first", 409
        )
    await controller.decide([ApiKeyRevoked(key_id=key.key_id, revoked_by=request.revoked_by)])
    state = await controller.wait_for(lambda s: not s.api_keys[key.key_id].live, within=FOLD_WITHIN)
    log.info("API key %s (%s) revoked", key.key_id, key.name)
    return state.api_keys[key.key_id]


def _holds(key_id: str) -> Callable[[ClusterState], bool]:
    return lambda state: key_id in state.api_keys


async def bootstrap_keys(controller: Controller, given: dict[KeyScope, str]) -> None:
    """Record each key given at start unless the log has it (the same key is the same event)."""
    for scope, key in given.items():
        event = bootstrap_event(key, scope, name=f"bootstrap {scope}")
        known = controller.cluster.api_keys.get(event.key_id)
        if known is not None:
            if not known.live:
                log.warning("the %s key given at start (%s) was revoked: it is refused", scope, event.key_id)
            continue
        await controller.decide([event])
        await controller.wait_for(_holds(event.key_id), within=FOLD_WITHIN)
        log.info("recorded the %s key given at start as %s", scope, event.key_id)
