"""One type per concept (tier, priority, reason, outcome), and stored events still decode."""

from __future__ import annotations

import msgspec
import pytest

import nrt.adapters.inference
import nrt.core.manifest
import nrt.core.protocol
from nrt.core.events import (
    DrainCompleted,
    EventDecodeError,
    ModelPlaced,
    RequestCompleted,
    SessionClosed,
    SessionKvEvicted,
    TierChanged,
    WorkerLost,
    decode,
    encode,
)
from nrt.core.protocol import ApplyResult, ControlCommand, ControlReply, PromoteModel
from nrt.core.state import fold
from nrt.core.vocabulary import ApplyOutcome, DrainOutcome, Priority, Reason, Tier

# Rows as the log holds them, written before the vocabulary existed (bare strings).
STORED = [
    b'{"artifact":"catalogue://minilm-l6","event_id":"e1","manifest_version":1,"model_id":"router",'
    b'"occurred_at":"2026-05-01T12:00:00Z","tier":"resident","type":"ModelPlaced","worker_id":"w1"}',
    b'{"bytes_held":91000000,"cold_start":false,"elapsed_ms":12.5,"event_id":"e2","from_tier":"unloaded",'
    b'"model_id":"router","occurred_at":"2026-05-01T12:00:01Z","reason":"placement","to_tier":"resident",'
    b'"type":"TierChanged","worker_id":"w1"}',
    b'{"bytes_held":0,"cold_start":false,"elapsed_ms":3.0,"event_id":"e3","from_tier":"unloaded",'
    b'"model_id":"legal","occurred_at":"2026-05-01T12:00:02Z","reason":"load_failed","to_tier":"unloaded",'
    b'"type":"TierChanged","worker_id":"w1"}',
    b'{"bytes_freed":100,"event_id":"e4","model_id":"router","occurred_at":"2026-05-01T12:00:03Z",'
    b'"reason":"idle","session_id":"s1","type":"SessionKvEvicted","worker_id":"w1"}',
    b'{"event_id":"e5","occurred_at":"2026-05-01T12:00:04Z","reason":"closed","session_id":"s1","type":"SessionClosed"}',
    b'{"abandoned":1,"event_id":"e6","from_version":1,"occurred_at":"2026-05-01T12:00:05Z","outcome":"timed_out",'
    b'"to_version":2,"type":"DrainCompleted","waited_ms":1000.0}',
    b'{"completion_tokens":8,"event_id":"e7","finish_reason":"length","latency_ms":9.0,"manifest_version":1,'
    b'"model_id":"router","occurred_at":"2026-05-01T12:00:06Z","prompt_tokens":4,"request_id":"q1",'
    b'"ttft_ms":null,"type":"RequestCompleted"}',
    b'{"event_id":"e8","occurred_at":"2026-05-01T12:00:07Z","reason":"heartbeat_timeout","type":"WorkerLost",'
    b'"worker_id":"w1"}',
]

# Every value the services have ever written: a value may be added, never renamed or dropped.
WRITTEN = {
    Tier: {"resident", "standby", "remote", "unloaded"},
    Priority: {"critical", "high", "normal", "low"},
    Reason: {
        "placement",
        "co_activation",
        "promotion_hint",
        "on_demand",
        "budget_pressure",
        "manifest_swap",
        "manifest_swap_aborted",
        "load_failed",
        "command",
        "idle",
        "model_unloaded",
        "closed",
        "heartbeat_timeout",
        "shutdown",
    },
    DrainOutcome: {"drained", "timed_out", "aborted"},
    ApplyOutcome: {"applied", "unchanged"},
}


# Fields added to an event type after these rows were written (a new version, with a default): an old
# row decodes with the default, and encodes to its own bytes plus the field. The hash chain keeps the
# stored bytes, so it is unchanged.
ADDED_SINCE: dict[str, dict[str, object]] = {
    "RequestCompleted": {"key_id": None},
    "TierChanged": {"error": None, "weights": None},
}


def test_stored_rows_decode_into_the_vocabulary_and_encode_to_the_same_bytes() -> None:
    events = [decode(row) for row in STORED]
    for row, event in zip(STORED, events, strict=True):
        stored = msgspec.json.decode(row)
        added = ADDED_SINCE.get(event.type, {})
        assert msgspec.json.decode(encode(event)) == {**stored, **added}
        assert encode(event) == encode(decode(encode(event)))  # canonical: sorted keys, no whitespace
        if not added:
            assert encode(event) == row  # the canonical bytes are unchanged
    expected = [
        (ModelPlaced, {"tier": Tier.RESIDENT}),
        (TierChanged, {"from_tier": Tier.UNLOADED, "to_tier": Tier.RESIDENT, "reason": Reason.PLACEMENT}),
        (TierChanged, {"from_tier": Tier.UNLOADED, "to_tier": Tier.UNLOADED, "reason": Reason.LOAD_FAILED}),
        (SessionKvEvicted, {"reason": Reason.IDLE}),
        (SessionClosed, {"reason": Reason.CLOSED}),
        (DrainCompleted, {"outcome": DrainOutcome.TIMED_OUT}),
        (RequestCompleted, {"finish_reason": "length"}),
        (WorkerLost, {"reason": Reason.HEARTBEAT_TIMEOUT}),
    ]
    for event, (kind, fields) in zip(events, expected, strict=True):
        assert type(event) is kind
        for name, value in fields.items():
            got = getattr(event, name)
            assert got == value
            assert type(got) is type(value), f"{kind.__name__}.{name} decoded as {type(got).__name__}"
    state = fold(events[:-1])  # before w1 is lost
    assert state.models["router"].placements["w1"].tier is Tier.RESIDENT
    assert state.models["legal"].placements == {}  # the failed load withdrew nothing it held


def test_every_value_ever_written_is_still_in_its_enum() -> None:
    for enum, values in WRITTEN.items():
        assert values <= {member.value for member in enum}, f"{enum.__name__} lost a value the log may hold"


def test_an_unknown_value_is_refused_naming_the_field() -> None:
    row = STORED[1].replace(b'"to_tier":"resident"', b'"to_tier":"hot"')
    with pytest.raises(EventDecodeError, match=r"Invalid enum value 'hot' - at `\$.to_tier`"):
        decode(row)
    with pytest.raises(msgspec.ValidationError, match=r"Invalid enum value 'teleport' - at `\$.reason`"):
        msgspec.json.decode(b'{"action":"promote","model_id":"m","reason":"teleport"}', type=ControlCommand)


def test_wire_messages_carry_the_same_types() -> None:
    command = msgspec.json.decode(
        b'{"action":"load","model_id":"m","reason":"placement","source":"/m","tier":"standby"}', type=ControlCommand
    )
    assert (command.reason, command.tier) == (Reason.PLACEMENT, Tier.STANDBY)
    reply = msgspec.json.decode(
        b'{"worker_id":"w","model_id":"m","tier":"resident","bytes_held":1,"elapsed_ms":1.0,"changed":true}',
        type=ControlReply,
    )
    assert reply.tier is Tier.RESIDENT
    assert PromoteModel(model_id="m").reason is Reason.ON_DEMAND
    result = ApplyResult(from_version=1, to_version=2, outcome=ApplyOutcome.APPLIED, drained_ms=0.0)
    assert b'"outcome":"applied"' in msgspec.json.encode(result)


def test_one_type_per_concept_wherever_it_is_imported_from() -> None:
    assert nrt.core.manifest.Tier is Tier
    assert nrt.core.manifest.Priority is Priority
    assert nrt.adapters.inference.Tier is Tier  # the engine's registry holds the same tiers
    assert nrt.adapters.inference.FinishReason is nrt.core.protocol.FinishReason
    assert nrt.adapters.inference.ChatMessage is nrt.core.protocol.ChatMessage
    assert nrt.adapters.inference.Usage is nrt.core.protocol.Usage
