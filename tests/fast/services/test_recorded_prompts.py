"""Recorded request texts (``audit.record_prompts``): kept for routed requests only while the
manifest says so, and shown by the events feed to admin keys only."""

from __future__ import annotations

from api_gateway.admitted_request import recorded_prompt
from api_gateway.events_feed import feed_query, shown
from api_gateway.validate import ChatCall
from nrt.core.events import RequestAdmitted, SessionClosed, decode, encode
from nrt.core.manifest import parse_manifest
from nrt.core.protocol import ChatMessage, SamplingParams

MANIFEST = """
cluster: c
models:
  router: {source: /models/router, intents: {billing: ["my bill"]}}
  specialists: [{id: billing, source: /models/billing}]
routing: {entry: router, dispatch_rule: "router.output.intent -> specialists.{intent}"}
"""
CALL = ChatCall(
    model="router",
    messages=(ChatMessage(role="user", content="my bill is wrong"), ChatMessage(role="assistant", content="ok")),
    params=SamplingParams(),
    stream=False,
    include_usage=False,
    session_id=None,
)


def test_the_routing_text_is_kept_only_for_routed_requests_under_record_prompts() -> None:
    recording = parse_manifest(MANIFEST + "audit: {record_prompts: true}\n")
    assert recorded_prompt(recording, CALL, routed=True) == "my bill is wrong"
    assert recorded_prompt(recording, CALL, routed=False) is None
    assert recorded_prompt(parse_manifest(MANIFEST), CALL, routed=True) is None


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
