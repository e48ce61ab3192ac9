"""Observability: OpenTelemetry traces (``tracing``), metrics (``metrics``) and the
``Telemetry`` bundle the composition root builds from settings (``telemetry``).

Nothing here talks to the network unless configured: without ``otlp_endpoint`` no
exporter is installed, without ``metrics_listen`` no port is opened.
"""
