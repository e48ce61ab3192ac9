"""Spans of an in-process server, captured in memory."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


def span_capture() -> tuple[TracerProvider, InMemorySpanExporter]:
    """A tracer provider for ``start_server(tracer_provider=...)`` that records every span
    the server ends into the returned in-memory exporter (without an OTLP endpoint the
    server records none)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter
