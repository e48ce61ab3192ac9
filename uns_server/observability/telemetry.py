"""The composition root's handle on observability: providers, instruments, exporters.

Built from settings without touching the network; ``serve_metrics()`` opens the
Prometheus port (started by ``App``, which also runs the queue query loop,
``workers.queue_sampler``, when ``metrics_enabled``).
Providers are owned, never installed as the process-global ones, so several servers
in one process (tests) keep separate metrics and spans.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from opentelemetry.metrics import MeterProvider as ApiMeterProvider
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricReader,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import NoOpTracerProvider, Tracer
from opentelemetry.trace import TracerProvider as ApiTracerProvider
from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector

from uns_server.observability import tracing
from uns_server.observability.metrics import METER_NAME, HubGauges, Metrics
from uns_server.observability.prometheus import PrometheusEndpoint
from uns_server.observability.rpc_metrics import rpc_metrics

if TYPE_CHECKING:
    from uns_server.settings import Settings

SERVICE_NAME = "uns-server"
SHUTDOWN_FLUSH_MILLIS = 5_000


class Telemetry:
    def __init__(
        self,
        tracer_provider: ApiTracerProvider,
        meter_provider: ApiMeterProvider,
        *,
        registry: CollectorRegistry | None = None,
        metrics_listen: str = "",
        poll_seconds: float = 15.0,
    ) -> None:
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        self.tracer: Tracer = tracer_provider.get_tracer(tracing.TRACER_NAME)
        self.metrics = Metrics(meter_provider.get_meter(METER_NAME))
        self.rpc_wrapper = tracing.traced(self.tracer)  # see api.wrapping
        # Per-RPC duration/method/code, only when metrics are exported (no cost otherwise).
        self.rpc_metrics_wrapper = (
            rpc_metrics(meter_provider.get_meter(METER_NAME))
            if isinstance(meter_provider, MeterProvider)
            else _unwrapped
        )
        self.registry = registry
        self._endpoint = (
            PrometheusEndpoint(registry, metrics_listen)
            if registry is not None and metrics_listen
            else None
        )
        self.poll_seconds = poll_seconds  # of the queue sampler (workers.queue_sampler)

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        tracer_provider: ApiTracerProvider | None = None,
        *,
        instance: str = "",
    ) -> Telemetry:
        """``instance``: the child of ``--processes N`` this is, as ``service.instance.id``
        (its processes' cumulative OTLP series must not be merged into one)."""
        attributes = {"service.name": SERVICE_NAME}
        if instance:
            attributes["service.instance.id"] = instance
        resource = Resource.create(attributes)
        if tracer_provider is None:
            tracer_provider = tracing.build_tracer_provider(
                resource, settings.otlp_endpoint, settings.otlp_protocol
            )
        readers: list[MetricReader] = []
        registry: CollectorRegistry | None = None
        if settings.metrics_listen:
            from opentelemetry.exporter.prometheus import PrometheusMetricReader

            registry = CollectorRegistry(auto_describe=True)
            # process_* (CPU, memory, open fds, start time) and python_info.
            ProcessCollector(registry=registry)
            PlatformCollector(registry=registry)
            readers.append(PrometheusMetricReader(registry=registry, scope_info_enabled=False))
        if settings.otlp_endpoint:
            readers.append(
                PeriodicExportingMetricReader(
                    _otlp_metric_exporter(settings.otlp_endpoint, settings.otlp_protocol)
                )
            )
        meter_provider: ApiMeterProvider = (
            MeterProvider(metric_readers=readers, resource=resource)
            if readers
            else NoOpMeterProvider()
        )
        return cls(
            tracer_provider,
            meter_provider,
            registry=registry,
            metrics_listen=settings.metrics_listen,
            poll_seconds=settings.metrics_poll_seconds,
        )

    @classmethod
    def disabled(cls) -> Telemetry:
        """No spans, no metrics: for components built outside the composition root."""
        return cls(NoOpTracerProvider(), NoOpMeterProvider())

    @property
    def metrics_enabled(self) -> bool:
        return isinstance(self.meter_provider, MeterProvider)

    @property
    def metrics_port(self) -> int:
        """The bound Prometheus port (0 when the endpoint is off or not started)."""
        return self._endpoint.port if self._endpoint is not None else 0

    def observe(self, hub: HubGauges) -> None:
        self.metrics.observe_watch(hub)

    def serve_metrics(self) -> int:
        """Open the Prometheus endpoint, if configured; returns its port (0: off)."""
        return self._endpoint.start() if self._endpoint is not None else 0

    async def aclose(self) -> None:
        """Stop the endpoint, flush and stop the exporters.

        Flushing may wait on an unreachable collector: both signals flush at once, on
        threads, each bounded by the exporters' ``EXPORT_TIMEOUT_SECONDS``.
        """
        if self._endpoint is not None:
            await self._endpoint.stop()
        flushes = []
        if isinstance(self.tracer_provider, TracerProvider):
            flushes.append(asyncio.to_thread(self.tracer_provider.shutdown))
        if isinstance(self.meter_provider, MeterProvider):
            flushes.append(
                asyncio.to_thread(
                    self.meter_provider.shutdown, timeout_millis=SHUTDOWN_FLUSH_MILLIS
                )
            )
        await asyncio.gather(*flushes)


def _unwrapped(method: str, handler: Any) -> Any:
    return handler


def _otlp_metric_exporter(endpoint: str, protocol: str) -> MetricExporter:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter(endpoint=endpoint, timeout=tracing.EXPORT_TIMEOUT_SECONDS)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
        OTLPMetricExporter as HttpMetricExporter,
    )

    return HttpMetricExporter(
        endpoint=tracing.signal_url(endpoint, "/v1/metrics"),
        timeout=tracing.EXPORT_TIMEOUT_SECONDS,
    )
