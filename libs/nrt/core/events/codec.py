"""The one canonical JSON encoding of events: sorted keys, UTC timestamps, no whitespace.

The same bytes go on the wire (NATS), into the event store and into the hash chain.
"""

from __future__ import annotations

from typing import Any

import msgspec

from nrt.core.events.schema import EVENT_TYPES, AnyEvent, Event
from nrt.core.events.upcasters import UpcastError, upcast

_encoder = msgspec.json.Encoder(order="sorted")
_decoder: msgspec.json.Decoder[AnyEvent] = msgspec.json.Decoder(AnyEvent)
_object_decoder: msgspec.json.Decoder[dict[str, Any]] = msgspec.json.Decoder(dict[str, Any])
_BY_TYPE: dict[str, type[Event]] = {cls.__name__: cls for cls in EVENT_TYPES}


class EventDecodeError(ValueError):
    """Bytes that are not a known event of a known version."""


def encode(event: Event) -> bytes:
    """Canonical JSON of ``event`` (deterministic: equal events give equal bytes)."""
    return _encoder.encode(event)


def decode(data: bytes | str, version: int | None = None) -> AnyEvent:
    """The event in canonical JSON ``data``; raises EventDecodeError naming the problem.

    ``version`` is the schema version that wrote ``data`` (a row's ``schema_version``, a message's
    version header); a body older than its type's ``VERSION`` goes through the upcasters first
    (``nrt.core.events.upcasters``). None: written at the current version.
    """
    # Nearly every body is at its type's current version: one typed decode, no JSON object in between.
    try:
        event: AnyEvent = _decoder.decode(data)
    except msgspec.ValidationError as exc:
        if version is None:
            raise EventDecodeError(f"not a valid event: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise EventDecodeError(f"not valid JSON: {exc}") from exc
    else:
        if version is None or version == event.VERSION:
            return event
    assert version is not None  # None returned or raised above
    return _decode_versioned(data, version)  # an older body (which may lack a field its type now requires)


def _decode_versioned(data: bytes | str, version: int) -> AnyEvent:
    try:
        body = _object_decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise EventDecodeError(f"not valid JSON: {exc}") from exc
    type_name = body.get("type")
    if not isinstance(type_name, str):
        raise EventDecodeError("not a valid event: it has no type")
    current = schema_version(type_name)
    if version != current:
        try:
            body = upcast(type_name, version, current, body)
        except UpcastError as exc:
            raise EventDecodeError(str(exc)) from exc
    try:
        return _decoder.decode(msgspec.json.encode(body))  # the one decoder, so old rows read as new ones do
    except msgspec.ValidationError as exc:
        raise EventDecodeError(f"not a valid event: {exc}") from exc


def event_class(type_name: str) -> type[Event]:
    try:
        return _BY_TYPE[type_name]
    except KeyError:
        raise EventDecodeError(f"unknown event type {type_name!r}; known: {', '.join(sorted(_BY_TYPE))}") from None


def schema_version(type_name: str) -> int:
    return event_class(type_name).VERSION
