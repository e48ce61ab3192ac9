"""Per-RPC server metrics: ``uns_rpc_server_duration_seconds{method,code}``, a histogram
of every gRPC call's duration by full method name and status code (its ``_count`` is the
call rate, by code the error rate). Wraps each handler once, at registration, like the
tracing wrapper (``api.wrapping``); a streaming call is measured from start to end.
Health checks and reflection are included: a probe storm shows up too."""

from __future__ import annotations

import inspect
import time
from typing import Any

import grpc
from opentelemetry.metrics import Meter

from uns_server.observability.tracing import status_code

# Unary calls take milliseconds; a WatchEvents stream lasts as long as its client.
RPC_BUCKETS_SECONDS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
    3600.0,
)


def rpc_metrics(meter: Meter) -> Any:
    """A handler wrapper recording each call's duration, method and status code."""
    histogram = meter.create_histogram(
        "uns.rpc.server.duration",
        unit="s",
        description="gRPC calls served, by full method name and status code "
        "(streams: from start to end).",
        explicit_bucket_boundaries_advisory=RPC_BUCKETS_SECONDS,
    )

    def wrap(method: str, handler: Any) -> Any:
        def record(
            started: float, context: grpc.aio.ServicerContext[Any, Any], exc: BaseException | None
        ) -> None:
            code = status_code(context, exc)
            histogram.record(time.monotonic() - started, {"method": method, "code": code.name})

        kwargs = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        if handler.response_streaming:
            inner = handler.stream_stream if handler.request_streaming else handler.unary_stream

            async def streaming(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
                started = time.monotonic()
                iterator: Any = None
                try:
                    result = inner(request, context)
                    if hasattr(result, "__aiter__"):
                        iterator = result.__aiter__()
                        async for item in iterator:
                            yield item
                    else:  # writes with context.write()
                        await result
                except BaseException as exc:
                    record(started, context, exc)
                    raise
                finally:  # a cancelled stream closes the inner one (its cleanup runs now)
                    if iterator is not None and hasattr(iterator, "aclose"):
                        await iterator.aclose()
                record(started, context, None)

            stream_type = (
                grpc.stream_stream_rpc_method_handler
                if handler.request_streaming
                else grpc.unary_stream_rpc_method_handler
            )
            return stream_type(streaming, **kwargs)

        unary_inner = handler.stream_unary if handler.request_streaming else handler.unary_unary

        async def unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            started = time.monotonic()
            try:
                result = unary_inner(request, context)
                if inspect.isawaitable(result):
                    result = await result
            except BaseException as exc:
                record(started, context, exc)
                raise
            record(started, context, None)
            return result

        unary_type = (
            grpc.stream_unary_rpc_method_handler
            if handler.request_streaming
            else grpc.unary_unary_rpc_method_handler
        )
        return unary_type(unary, **kwargs)

    return wrap
