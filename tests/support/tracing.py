"""Spans of an in-process server, captured in memory."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.support.server import RunningServer


def capture_spans(server: RunningServer) -> InMemorySpanExporter:
    """Every span the server ends from now on, in an in-memory exporter."""
    exporter = InMemorySpanExporter()
    provider = server.app.telemetry.tracer_provider
    assert isinstance(provider, TracerProvider)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter
