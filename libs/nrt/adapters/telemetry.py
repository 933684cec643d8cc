"""OpenTelemetry set-up for a service: OTLP export when OTEL_EXPORTER_OTLP_ENDPOINT is set."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from nrt.adapters.settings import Settings


def setup_tracing(service_name: str) -> TracerProvider | None:
    """Install a tracer provider named ``service_name``; None when no exporter is configured.

    Without ``OTEL_EXPORTER_OTLP_ENDPOINT`` the no-op provider stays: context still
    propagates through NATS headers, nothing is exported.
    """
    if not Settings.from_env().otlp_endpoint:
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return provider
