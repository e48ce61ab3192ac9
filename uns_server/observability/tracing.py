"""Traces (OpenTelemetry): one span per RPC, per dispatch attempt and per adapter call.

Span names and kinds:

- ``<package.Service>/<Method>`` (SERVER), e.g. ``uns.v1.NotificationService/SendNotification``,
  opened by ``traced`` around every RPC except health probes. It continues
  the caller's W3C ``traceparent`` (and ``tracestate``) gRPC metadata.
- ``uns.dispatch.attempt`` (CONSUMER): one claim -> send -> settle of one notification.
  It starts a *new* trace and carries a **link** to the SendNotification span that
  accepted the work: intake stores that span's W3C context in the notification
  document (``trace_context``), and retries may run hours after the RPC returned, so a
  parent/child relation would stretch one trace over every retry (OpenTelemetry's
  messaging conventions use links for exactly this).
- ``uns.channel.send`` (CLIENT): one adapter call, a child of the attempt.

Exporting is separate from recording: spans are always recorded (so logs carry a
``trace_id`` that matches the caller's trace), and exported only when an OTLP endpoint
is configured. The sampler follows the SDK's ``OTEL_TRACES_SAMPLER`` variables
(default: parent-based, always on).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlparse

import grpc
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import (
    INVALID_SPAN,
    Link,
    NoOpTracer,
    NoOpTracerProvider,
    Span,
    SpanKind,
    Status,
    StatusCode,
    Tracer,
)
from opentelemetry.trace import TracerProvider as ApiTracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TRACER_NAME = "uns_server"
ATTEMPT_SPAN = "uns.dispatch.attempt"
CHANNEL_SEND_SPAN = "uns.channel.send"
# Probes arrive every few seconds from every orchestrator: tracing them is noise.
UNTRACED_PREFIXES = ("/grpc.health.v1.Health/",)
# OpenTelemetry's gRPC conventions: these codes are the server's fault; the others
# (NOT_FOUND, INVALID_ARGUMENT...) are a correct answer to a bad call.
_SERVER_ERRORS = frozenset(
    {
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)
_W3C = TraceContextTextMapPropagator()
# One OTLP export, retries included. An unreachable collector then delays shutdown by
# about this much instead of the SDK's 10 s per signal (they flush in parallel).
EXPORT_TIMEOUT_SECONDS = 5.0


def build_tracer_provider(
    resource: Resource, otlp_endpoint: str | None, otlp_protocol: str
) -> ApiTracerProvider:
    """Spans are recorded only when something exports them. Without an endpoint the
    no-op provider still carries a caller's ``traceparent`` through (its spans are the
    caller's context), at none of the cost of recording: recording spans nobody
    exported took ~10 % of the server's CPU per SendNotification (docs/PERFORMANCE.md)."""
    if not otlp_endpoint:
        return NoOpTracerProvider()
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(
        BatchSpanProcessor(_otlp_span_exporter(otlp_endpoint, otlp_protocol))
    )
    return provider


def _otlp_span_exporter(endpoint: str, protocol: str) -> SpanExporter:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(endpoint=endpoint, timeout=EXPORT_TIMEOUT_SECONDS)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpSpanExporter,
    )

    return HttpSpanExporter(
        endpoint=signal_url(endpoint, "/v1/traces"), timeout=EXPORT_TIMEOUT_SECONDS
    )


def signal_url(endpoint: str, path: str) -> str:
    """OTLP/HTTP: a bare collector URL gets the signal's path (as the env variable does)."""
    if urlparse(endpoint).path in ("", "/"):
        return endpoint.rstrip("/") + path
    return endpoint


# -- W3C context in and out -------------------------------------------------------


def current_trace_context() -> dict[str, str]:
    """The current span as a W3C carrier (``traceparent``, maybe ``tracestate``);
    empty when no span is recording. Stored with accepted work for the link."""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier)
    return carrier


def links_from(carrier: Mapping[str, str] | None) -> list[Link]:
    """A link to the span described by a stored W3C carrier, if it is valid."""
    if not carrier:
        return []
    span_context = trace.get_current_span(_W3C.extract(dict(carrier))).get_span_context()
    return [Link(span_context)] if span_context.is_valid else []


def _carrier(metadata: Iterable[tuple[str, Any]] | None) -> dict[str, str]:
    return {k: v for k, v in metadata or () if isinstance(v, str)}


def _has_traceparent(metadata: Iterable[tuple[str, Any]] | None) -> bool:
    return any(key == "traceparent" for key, _ in metadata or ())


# -- dispatch ---------------------------------------------------------------------


@contextmanager
def attempt_span(
    tracer: Tracer,
    *,
    notification_id: str,
    attempt: int,
    cycle: int,
    trace_context: Mapping[str, str] | None,
) -> Iterator[Span]:
    """A root span for one dispatch attempt, linked to the accepting RPC's span."""
    if isinstance(tracer, NoOpTracer):  # no span, but still no trace the task inherited
        token = otel_context.attach(otel_context.Context())
        try:
            yield INVALID_SPAN
        finally:
            otel_context.detach(token)
        return
    with tracer.start_as_current_span(
        ATTEMPT_SPAN,
        context=otel_context.Context(),  # a new trace, whatever is current
        kind=SpanKind.CONSUMER,
        links=links_from(trace_context),
        attributes={
            "uns.notification_id": notification_id,
            "uns.attempt": attempt,
            "uns.cycle": cycle,
        },
    ) as span:
        yield span


@contextmanager
def channel_span(tracer: Tracer, *, channel: str, notification_id: str) -> Iterator[Span]:
    if isinstance(tracer, NoOpTracer):
        yield INVALID_SPAN
        return
    with tracer.start_as_current_span(
        CHANNEL_SEND_SPAN,
        kind=SpanKind.CLIENT,
        attributes={"uns.channel": channel, "uns.notification_id": notification_id},
    ) as span:
        yield span


def set_error(span: Span, description: str) -> None:
    span.set_status(Status(StatusCode.ERROR, description))


# -- RPCs -------------------------------------------------------------------------


def traced(tracer: Tracer) -> Callable[[str, Any], Any]:
    """Wraps a method handler (once, at registration: ``api.wrapping``) so that a
    SERVER span surrounds every call, continuing the caller's ``traceparent``.

    The span is current while the servicer runs (logs get its ``trace_id``). For a
    server stream it is made current around each step of the response iterator
    rather than across ``yield``: a context attached in one step and detached in
    another would leak between the calls grpc interleaves on the event loop.
    """

    def wrap(method: str, handler: Any) -> Any:
        if method.startswith(UNTRACED_PREFIXES):
            return handler
        return _traced(tracer, method, handler)

    return wrap


def _traced(tracer: Tracer, method: str, handler: Any) -> Any:
    name = method.lstrip("/")
    service, _, rpc = name.partition("/")
    attributes = {"rpc.system": "grpc", "rpc.service": service, "rpc.method": rpc}
    # With the no-op tracer (no exporter) a span only makes the caller's trace current,
    # for logs and the link stored with accepted work: a call without one skips it.
    recording = not isinstance(tracer, NoOpTracer)

    def start(context: grpc.aio.ServicerContext[Any, Any]) -> Span:
        parent = _W3C.extract(_carrier(context.invocation_metadata()))
        return tracer.start_span(name, context=parent, kind=SpanKind.SERVER, attributes=attributes)

    kwargs = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.response_streaming:
        inner = handler.stream_stream if handler.request_streaming else handler.unary_stream

        async def streaming(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            span = start(context)
            current = trace.set_span_in_context(span)
            iterator: Any = None
            try:
                token = otel_context.attach(current)
                try:
                    result = inner(request, context)
                    if not hasattr(result, "__aiter__"):  # writes with context.write()
                        await result
                        result = None
                finally:
                    otel_context.detach(token)
                if result is not None:
                    iterator = result.__aiter__()
                    while True:
                        token = otel_context.attach(current)
                        try:
                            item = await iterator.__anext__()
                        except StopAsyncIteration:
                            break
                        finally:
                            otel_context.detach(token)
                        yield item
            except BaseException as exc:
                _finish(span, context, exc)
                raise
            finally:
                if iterator is not None and hasattr(iterator, "aclose"):
                    await iterator.aclose()
            _finish(span, context, None)

        handler_type = (
            grpc.stream_stream_rpc_method_handler
            if handler.request_streaming
            else grpc.unary_stream_rpc_method_handler
        )
        return handler_type(streaming, **kwargs)

    inner = handler.stream_unary if handler.request_streaming else handler.unary_unary

    async def unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        if not recording and not _has_traceparent(context.invocation_metadata()):
            result = inner(request, context)
            return (await result) if inspect.isawaitable(result) else result
        span = start(context)
        with trace.use_span(
            span, end_on_exit=False, record_exception=False, set_status_on_exception=False
        ):
            try:
                result = inner(request, context)
                if inspect.isawaitable(result):
                    result = await result
            except BaseException as exc:
                _finish(span, context, exc)
                raise
        _finish(span, context, None)
        return result

    handler_type = (
        grpc.stream_unary_rpc_method_handler
        if handler.request_streaming
        else grpc.unary_unary_rpc_method_handler
    )
    return handler_type(unary, **kwargs)


def status_code(
    context: grpc.aio.ServicerContext[Any, Any], exc: BaseException | None
) -> grpc.StatusCode:
    if isinstance(exc, asyncio.CancelledError | GeneratorExit):
        return grpc.StatusCode.CANCELLED
    code: Any = None
    try:
        code = context.code()
    except Exception:  # not available on this grpc build: fall back to the exception
        code = None
    if isinstance(code, grpc.StatusCode) and (code != grpc.StatusCode.OK or exc is None):
        return code
    if isinstance(code, int) and code != 0:
        for status in grpc.StatusCode:
            if status.value[0] == code:
                return status
    return grpc.StatusCode.OK if exc is None else grpc.StatusCode.UNKNOWN


def _finish(
    span: Span, context: grpc.aio.ServicerContext[Any, Any], exc: BaseException | None
) -> None:
    code = status_code(context, exc)
    span.set_attribute("rpc.grpc.status_code", code.value[0])
    if code in _SERVER_ERRORS:
        span.set_status(Status(StatusCode.ERROR, code.name))
        if exc is not None and not isinstance(exc, grpc.aio.AbortError):
            span.record_exception(exc)
    span.end()
