"""Spans of an in-process server, captured in memory."""

from __future__ import annotations

from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from uns_server.observability.telemetry import Telemetry


def span_capture() -> tuple[Telemetry, InMemorySpanExporter]:
    """Telemetry for ``start_server(telemetry=...)`` that records every span the server
    ends into the returned in-memory exporter (without an OTLP endpoint the server
    records none)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Telemetry(provider, NoOpMeterProvider()), exporter
