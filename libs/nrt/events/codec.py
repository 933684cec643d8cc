"""The one canonical JSON encoding of events: sorted keys, UTC timestamps, no whitespace.

The same bytes go on the wire (NATS), into the event store and into the hash chain.
"""

from __future__ import annotations

import msgspec

from nrt.events.schema import EVENT_TYPES, AnyEvent, Event

_encoder = msgspec.json.Encoder(order="sorted")
_decoder: msgspec.json.Decoder[AnyEvent] = msgspec.json.Decoder(AnyEvent)
_BY_TYPE: dict[str, type[Event]] = {cls.__name__: cls for cls in EVENT_TYPES}


class EventDecodeError(ValueError):
    """Bytes that are not a known event of a known version."""


def encode(event: Event) -> bytes:
    """Canonical JSON of ``event`` (deterministic: equal events give equal bytes)."""
    return _encoder.encode(event)


def decode(data: bytes | str) -> AnyEvent:
    """The event in canonical JSON ``data``; raises EventDecodeError naming the problem."""
    try:
        return _decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise EventDecodeError(f"not a valid event: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise EventDecodeError(f"not valid JSON: {exc}") from exc


def event_class(type_name: str) -> type[Event]:
    try:
        return _BY_TYPE[type_name]
    except KeyError:
        raise EventDecodeError(f"unknown event type {type_name!r}; known: {', '.join(sorted(_BY_TYPE))}") from None


def schema_version(type_name: str) -> int:
    return event_class(type_name).VERSION
