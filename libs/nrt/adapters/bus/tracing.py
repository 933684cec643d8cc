"""OpenTelemetry context in NATS headers: inject on send, extract on receive."""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry import context as otel_context
from opentelemetry import propagate


def inject(headers: dict[str, str] | None = None) -> dict[str, str]:
    """``headers`` (a copy) plus the current trace context (``traceparent``, ``tracestate``)."""
    carrier = dict(headers or {})
    propagate.inject(carrier)
    return carrier


def extract(headers: Mapping[str, str] | None) -> otel_context.Context:
    """The trace context a message carried (an empty context if none)."""
    return propagate.extract(dict(headers or {}))
