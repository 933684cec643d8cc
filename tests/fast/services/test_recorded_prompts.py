"""Recorded request texts (``audit.record_prompts``): kept for routed requests only while the
manifest says so, and shown by the events feed to admin keys only."""

from __future__ import annotations

import msgspec

from api_gateway.admitted_request import recorded_prompt
from api_gateway.events_feed import feed_query, shown
from api_gateway.validate import ChatCall
from nrt.core.events import RequestAdmitted, RequestRouted, SessionClosed, decode, encode
from nrt.core.events.upcasters import upcast
from nrt.core.manifest import parse_manifest
from nrt.core.protocol import (
    ChatMessage,
    ResponseFormat,
    SamplingParams,
    ToolFunction,
    Tools,
    constrained_by,
    constraint_text,
)
from nrt.core.whatif.recorded import recorded_requests

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
    admitted = RequestAdmitted(
        request_id="r1",
        manifest_version=1,
        model_id="router",
        prompt="my card number is ...",
        constrained="json_schema",
        constraint='{"type": "object"}',
    )
    data = encode(admitted)
    assert shown(admitted, data, admin=True) == data
    hidden = decode(shown(admitted, data, admin=False))
    assert isinstance(hidden, RequestAdmitted)
    assert hidden.prompt is None
    assert hidden.constraint is None
    assert hidden.constrained == "json_schema"  # that it was constrained is no secret
    assert hidden.request_id == "r1"
    assert hidden.event_id == admitted.event_id
    other = SessionClosed(session_id="s1")
    assert shown(other, encode(other), admin=False) == encode(other)
    assert feed_query(None, 10, admin=False).admin is False
    assert feed_query(None, 10, admin=True).admin is True


def test_what_constrained_a_request_is_named_and_its_text_kept_apart() -> None:
    schema = ResponseFormat(type="json_schema", schema='{"type": "object"}')
    tools = Tools(functions=(ToolFunction(name="add"),))
    assert constrained_by(SamplingParams()) is None
    assert constrained_by(SamplingParams(response_format=ResponseFormat(type="json_object"))) == "json_object"
    assert constrained_by(SamplingParams(response_format=schema)) == "json_schema"
    assert constrained_by(SamplingParams(response_format=schema, tools=tools)) == "tools"
    none = msgspec.structs.replace(tools, choice="none")
    assert constrained_by(SamplingParams(response_format=schema, tools=none)) == "json_schema"
    assert constraint_text(SamplingParams(response_format=schema)) == '{"type": "object"}'
    assert '"name":"add"' in (constraint_text(SamplingParams(tools=tools)) or "")
    assert constraint_text(SamplingParams(response_format=ResponseFormat(type="json_object"))) is None


def test_a_v4_request_admitted_decodes_unconstrained() -> None:
    body = {"request_id": "r", "manifest_version": 1, "model_id": "router", "gateway_id": "g"}
    assert upcast("RequestAdmitted", 4, 5, body) == {**body, "constrained": None, "constraint": None}


def test_the_what_if_replay_knows_which_recorded_requests_were_constrained() -> None:
    admitted = [
        RequestAdmitted(request_id=r, manifest_version=1, model_id="router", prompt="my bill", constrained=kind)
        for r, kind in (("r1", "tools"), ("r2", None))
    ]
    routed = [
        RequestRouted(
            request_id=r,
            manifest_version=1,
            model_id="router",
            worker_id="w",
            intent="billing",
            scores={"billing": 1.0},
            confidence=1.0,
            threshold=0.5,
            rule="router.output.intent -> specialists.{intent}",
            target="billing",
            latency_ms=1.0,
        )
        for r in ("r1", "r2")
    ]
    recorded = recorded_requests([*admitted, *routed])
    assert [(r.request_id, r.constrained) for r in recorded] == [("r1", "tools"), ("r2", None)]
