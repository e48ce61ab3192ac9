"""Spans in an in-memory exporter, and log records that carry the trace.

The caller sends a W3C ``traceparent``: the SendNotification span continues that
trace; the dispatch attempt starts its own trace, linked to the RPC span through
the context stored at intake; each adapter call is a child of the attempt.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from tests.support.server import KEYS, RunningServer, send_request, start_server
from tests.support.tracing import span_capture
from uns.v1 import notification_service_pb2 as pb
from uns_server.logs import JsonFormatter, TraceContextFilter
from uns_server.observability.tracing import ATTEMPT_SPAN, CHANNEL_SEND_SPAN

CALLER_TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{CALLER_TRACE_ID}-{CALLER_SPAN_ID}-01"
SEND_SPAN = "uns.v1.NotificationService/SendNotification"


@pytest.fixture
async def traced(
    db_url: str, tmp_path: Path
) -> AsyncIterator[tuple[RunningServer, InMemorySpanExporter]]:
    provider, exporter = span_capture()
    server = await start_server(db_url, tmp_path, dispatch_enabled=False, tracer_provider=provider)
    try:
        yield server, exporter
    finally:
        await server.stop()


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


async def ended(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    """The spans called ``name`` once one has ended: the server ends an RPC's span
    after the status went out, so the caller may see the reply first."""
    for _ in range(100):
        if named(exporter, name):
            break
        await asyncio.sleep(0.05)
    return named(exporter, name)


def hex_trace(span: ReadableSpan) -> str:
    assert span.context is not None
    return format(span.context.trace_id, "032x")


async def test_rpc_span_continues_traceparent_and_attempt_links_to_it(
    traced: tuple[RunningServer, InMemorySpanExporter], caplog: pytest.LogCaptureFixture
) -> None:
    server, exporter = traced
    caplog.set_level(logging.DEBUG)
    caplog.handler.addFilter(TraceContextFilter())
    stub: Any = server.stub("alice").stub  # the raw stub: extra metadata
    sent = await stub.SendNotification(
        send_request(idempotency_key="traced"),
        metadata=(("authorization", f"Bearer {KEYS['alice']}"), ("traceparent", TRACEPARENT)),
        timeout=10,
    )
    nid = sent.notification_id

    [rpc] = await ended(exporter, SEND_SPAN)
    assert rpc.kind == SpanKind.SERVER
    assert hex_trace(rpc) == CALLER_TRACE_ID  # the caller's trace, continued
    assert rpc.parent is not None and format(rpc.parent.span_id, "016x") == CALLER_SPAN_ID
    assert rpc.parent.is_remote
    assert rpc.attributes is not None
    assert rpc.attributes["rpc.system"] == "grpc"
    assert rpc.attributes["rpc.method"] == "SendNotification"
    assert rpc.attributes["rpc.grpc.status_code"] == grpc.StatusCode.OK.value[0]
    assert rpc.attributes["uns.notification_id"] == nid

    assert (await server.app.dispatcher.run_once()).claimed == 1
    [attempt] = named(exporter, ATTEMPT_SPAN)
    assert attempt.kind == SpanKind.CONSUMER
    assert attempt.parent is None  # its own trace (retries may come hours later) ...
    assert hex_trace(attempt) != CALLER_TRACE_ID
    [link] = attempt.links  # ... linked to the span that accepted the work
    assert rpc.context is not None
    assert link.context.trace_id == rpc.context.trace_id
    assert link.context.span_id == rpc.context.span_id
    assert attempt.attributes is not None
    assert attempt.attributes["uns.notification_id"] == nid
    assert attempt.attributes["uns.outcome"] == "delivered"
    [send] = named(exporter, CHANNEL_SEND_SPAN)
    assert send.kind == SpanKind.CLIENT
    assert attempt.context is not None and send.parent is not None
    assert send.parent.span_id == attempt.context.span_id
    assert send.attributes is not None and send.attributes["uns.channel"] == "log"

    # Logs: intake's line is in the caller's trace, the delivery's in the attempt's.
    accepted = [r for r in caplog.records if r.getMessage() == "notification accepted"]
    assert [(r.__dict__["notification_id"], r.__dict__["trace_id"]) for r in accepted] == [
        (nid, CALLER_TRACE_ID)
    ]
    [settled] = [r for r in caplog.records if r.getMessage() == "delivery attempt settled"]
    assert settled.__dict__["notification_id"] == nid
    assert settled.__dict__["trace_id"] == hex_trace(attempt)
    line = json.loads(JsonFormatter().format(settled))
    assert line["notification_id"] == nid and line["trace_id"] == hex_trace(attempt)
    assert line["span_id"] == format(attempt.context.span_id, "016x")


async def test_refused_rpc_span_records_the_status_code(
    traced: tuple[RunningServer, InMemorySpanExporter],
) -> None:
    server, exporter = traced
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await server.stub("oscar").GetNotification(
            pb.GetNotificationRequest(notification_id="00000000-0000-4000-8000-000000000000")
        )
    assert refused.value.code() == grpc.StatusCode.NOT_FOUND
    [span] = await ended(exporter, "uns.v1.NotificationService/GetNotification")
    assert span.attributes is not None
    assert span.attributes["rpc.grpc.status_code"] == grpc.StatusCode.NOT_FOUND.value[0]
    assert span.status.status_code == StatusCode.UNSET  # a client error, not the server's
    assert span.parent is None  # no traceparent: a new trace


async def test_streaming_rpc_gets_a_span_and_health_probes_do_not(
    traced: tuple[RunningServer, InMemorySpanExporter],
) -> None:
    server, exporter = traced
    call = server.stub("oscar").WatchEvents(pb.WatchEventsRequest(), timeout=None)
    first = await call.read()
    assert first.HasField("heartbeat")
    call.cancel()
    name = "uns.v1.NotificationService/WatchEvents"
    [span] = await ended(exporter, name)  # the server sees the cancellation asynchronously
    assert span.kind == SpanKind.SERVER
    assert span.attributes is not None
    assert span.attributes["rpc.grpc.status_code"] == grpc.StatusCode.CANCELLED.value[0]
    assert not [s for s in exporter.get_finished_spans() if "grpc.health" in s.name]


async def test_without_an_exporter_nothing_is_recorded_and_logs_keep_the_callers_trace(
    db_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """No ``otlp_endpoint``: the server records no spans (nobody would read them), and its
    log lines still carry the trace the caller sent."""
    server = await start_server(db_url, tmp_path, dispatch_enabled=False)
    try:
        assert not server.app.telemetry.tracer.start_span("probe").is_recording()
        caplog.set_level(logging.DEBUG)
        caplog.handler.addFilter(TraceContextFilter())
        stub: Any = server.stub("alice").stub
        sent = await stub.SendNotification(
            send_request(idempotency_key="untraced"),
            metadata=(("authorization", f"Bearer {KEYS['alice']}"), ("traceparent", TRACEPARENT)),
            timeout=10,
        )
    finally:
        await server.stop()
    accepted = [r for r in caplog.records if r.getMessage() == "notification accepted"]
    assert [(r.__dict__["notification_id"], r.__dict__["trace_id"]) for r in accepted] == [
        (sent.notification_id, CALLER_TRACE_ID)
    ]
