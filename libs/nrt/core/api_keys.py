"""API keys: how one is made, hashed and named, and how a known key is recognised.

A key is ``nrt-`` and 43 URL-safe characters (32 random bytes). The log holds only its
SHA-256 (``ApiKeyCreated.key_sha256``); its ``key_id``, the hash's first 12 hex digits,
names it where a secret must not appear (lists, usage, revocation). A key given to a stack
from outside (``NRT_API_KEY``, ``NRT_ADMIN_KEY``) is recorded by :func:`bootstrap_event`,
whose event id follows from the hash: giving the same key again records nothing new.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping

from nrt.core.events import ApiKeyCreated, derived_event_id
from nrt.core.state import ApiKey, ClusterState
from nrt.core.vocabulary import KeyScope

KEY_PREFIX = "nrt-"
KEY_ID_LENGTH = 12
MIN_KEY_LENGTH = 16  # a key given from outside shorter than this is easy to guess (a warning, not a refusal)


def generate_key() -> str:
    """A fresh random key (shown once; only its hash is kept)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def key_sha256(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def key_id_of(digest: str) -> str:
    """The non-secret name of the key whose SHA-256 is ``digest``."""
    return digest[:KEY_ID_LENGTH]


def weak(key: str) -> bool:
    """Whether a key given from outside is too short to be a secret."""
    return len(key) < MIN_KEY_LENGTH


def bootstrap_event(key: str, scope: KeyScope, name: str) -> ApiKeyCreated:
    """The ``ApiKeyCreated`` of a key given to the stack at start (no limits)."""
    digest = key_sha256(key)
    return ApiKeyCreated(
        event_id=derived_event_id("bootstrap-key", digest),  # the same key, the same event: no duplicate
        key_id=key_id_of(digest),
        name=name,
        scope=scope,
        key_sha256=digest,
    )


def find_key(keys: Mapping[str, ApiKey], key: str) -> ApiKey | None:
    """The live key ``key`` is, or None (unknown, or revoked)."""
    digest = key_sha256(key)
    found = keys.get(key_id_of(digest))
    if found is None or not found.live or not hmac.compare_digest(found.key_sha256, digest):
        return None
    return found


def allows(key: ApiKey, needed: KeyScope) -> bool:
    """Whether ``key`` may do what needs ``needed`` (an admin key may also infer)."""
    return key.scope == KeyScope.ADMIN or needed == KeyScope.INFER


def live_admin_keys(state: ClusterState) -> list[ApiKey]:
    return [k for k in state.api_keys.values() if k.live and k.scope == KeyScope.ADMIN]
