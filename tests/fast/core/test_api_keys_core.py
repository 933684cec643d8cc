"""API keys without I/O: the fold of key events and usage, the key helpers (the rate limits:
``tests/fast/services/test_shared_rate_limits.py``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from nrt.core.api_keys import allows, bootstrap_event, find_key, generate_key, key_id_of, key_sha256
from nrt.core.events import (
    ApiKeyCreated,
    ApiKeyRevoked,
    RequestAdmitted,
    RequestCompleted,
    RequestFailed,
    decode,
    encode,
)
from nrt.core.state import fold
from nrt.core.vocabulary import KeyScope

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def created(key: str, scope: KeyScope = KeyScope.INFER, **limits: float) -> ApiKeyCreated:
    digest = key_sha256(key)
    return ApiKeyCreated(
        key_id=key_id_of(digest), name="k", scope=scope, key_sha256=digest, occurred_at=at(0), **limits
    )  # type: ignore[arg-type]


def test_keys_fold_by_id_with_their_usage_and_revocation() -> None:
    key = generate_key()
    made = created(key, rps=2.0)
    kid = made.key_id
    events = [
        made,
        created(key, KeyScope.ADMIN),  # the same id again: the first one stands
        RequestAdmitted(request_id="r1", manifest_version=1, model_id="router", key_id=kid, occurred_at=at(1)),
        RequestCompleted(
            request_id="r1",
            manifest_version=1,
            model_id="billing",
            prompt_tokens=7,
            completion_tokens=3,
            latency_ms=1.0,
            key_id=kid,
            occurred_at=at(2),
        ),
        RequestAdmitted(request_id="r2", manifest_version=1, model_id="router", key_id=kid, occurred_at=at(3)),
        RequestFailed(request_id="r2", manifest_version=1, code="x", message="x", status=503, key_id=kid),
        RequestAdmitted(request_id="r3", manifest_version=1, model_id="router"),  # no key: auth off
        ApiKeyRevoked(key_id=kid, occurred_at=at(5)),
        ApiKeyRevoked(key_id=kid, occurred_at=at(6)),  # revoked once, at the first revocation
        ApiKeyRevoked(key_id="unknown"),
    ]
    state = fold(events)
    folded = state.api_keys[kid]
    assert (folded.scope, folded.rps, folded.key_sha256, folded.created_at) == (
        KeyScope.INFER,
        2.0,
        key_sha256(key),
        at(0),
    )
    usage = folded.usage
    assert (usage.requests, usage.completed, usage.failed) == (2, 1, 1)
    assert (usage.prompt_tokens, usage.completion_tokens) == (7, 3)
    assert folded.revoked_at == at(5)
    assert not folded.live
    assert list(state.api_keys) == [kid]
    assert state.counters.requests_admitted == 3


def test_a_key_is_found_by_its_hash_while_it_is_live() -> None:
    key = generate_key()
    assert key.startswith("nrt-")
    assert len(key) > 40
    state = fold([created(key)])
    found = find_key(state.api_keys, key)
    assert found is not None
    assert found.key_id == key_id_of(key_sha256(key))
    assert find_key(state.api_keys, key + "x") is None
    assert find_key(state.api_keys, "nrt-wrong") is None
    revoked = fold([ApiKeyRevoked(key_id=found.key_id)], state)
    assert find_key(revoked.api_keys, key) is None


def test_scopes_an_admin_key_may_also_infer() -> None:
    infer, admin = (fold([created(k, s)]).api_keys for k, s in (("i" * 20, KeyScope.INFER), ("a" * 20, KeyScope.ADMIN)))
    (infer_key,), (admin_key,) = infer.values(), admin.values()
    assert allows(infer_key, KeyScope.INFER)
    assert not allows(infer_key, KeyScope.ADMIN)
    assert allows(admin_key, KeyScope.INFER)
    assert allows(admin_key, KeyScope.ADMIN)


def test_a_bootstrap_key_is_one_event_however_often_it_is_given() -> None:
    first, again = (
        bootstrap_event("s3cret-s3cret-s3cret", KeyScope.ADMIN, "b"),
        bootstrap_event("s3cret-s3cret-s3cret", KeyScope.ADMIN, "b"),
    )
    assert first.event_id == again.event_id
    assert first.key_sha256 == key_sha256("s3cret-s3cret-s3cret")
    assert "s3cret" not in encode(first).decode()  # the log never holds the key
    assert decode(encode(first)) == first


def test_request_events_written_before_keys_still_decode() -> None:
    old = (
        b'{"event_id":"e","manifest_version":1,"model_id":"router","occurred_at":"2025-01-01T00:00:00Z",'
        b'"request_id":"r","session_id":null,"stream":false,"type":"RequestAdmitted"}'
    )
    event = decode(old)
    assert isinstance(event, RequestAdmitted)
    assert event.key_id is None
