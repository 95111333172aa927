"""Optional OpenTelemetry tracing, switched on as kagent switches on its own: OTEL_TRACING_ENABLED=true,
with the standard OTEL_EXPORTER_OTLP_* variables naming the collector. Needs the `tracing` extra."""

from __future__ import annotations

from typing import Any

_provider_installed = False


def tracing_middleware(enabled: bool) -> list[Any]:
    """The ASGI tracing middleware (a span per request, W3C trace context honoured), or nothing."""
    if not enabled:
        return []
    try:
        from litestar.plugins.opentelemetry import OpenTelemetryConfig
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
    except ImportError as exc:  # a clear start-up failure instead of silently not tracing
        raise RuntimeError(
            "OTEL_TRACING_ENABLED=true needs the tracing extra: pip install 'kagent-fork[tracing]'"
        ) from exc
    global _provider_installed
    if not _provider_installed and not isinstance(trace.get_tracer_provider(), TracerProvider):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        provider = TracerProvider(resource=Resource.create({"service.name": "kagent-fork"}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(provider)
        _provider_installed = True
    return [OpenTelemetryConfig(exclude=["/healthz", "/readyz", "/metrics"]).middleware]
