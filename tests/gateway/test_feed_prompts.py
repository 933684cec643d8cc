"""The events feed shows recorded request texts (``audit.record_prompts``) to admin keys only."""

from __future__ import annotations

from api_gateway.events_feed import feed_query, shown
from nrt.events import RequestAdmitted, SessionClosed, decode, encode


def test_an_infer_keys_feed_shows_request_admitted_without_its_prompt() -> None:
    admitted = RequestAdmitted(request_id="r1", manifest_version=1, model_id="router", prompt="my card number is ...")
    data = encode(admitted)
    assert shown(admitted, data, admin=True) == data
    hidden = decode(shown(admitted, data, admin=False))
    assert isinstance(hidden, RequestAdmitted)
    assert hidden.prompt is None
    assert hidden.request_id == "r1"
    assert hidden.event_id == admitted.event_id
    other = SessionClosed(session_id="s1")
    assert shown(other, encode(other), admin=False) == encode(other)
    assert feed_query(None, 10, admin=False).admin is False
    assert feed_query(None, 10, admin=True).admin is True
