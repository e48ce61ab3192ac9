"""Many and slow WatchEvents subscribers: hundreds of streams on one server, and a
subscriber that falls behind is served from the table instead of an unbounded buffer."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from tests.support.server import KEYS, send_request, start_server
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import notification_service_pb2_grpc as pb_grpc
from uns.v1 import types_pb2 as t

STREAMS = 300


async def test_hundreds_of_streams_each_receive_the_event(db_url: str, tmp_path: Path) -> None:
    server = await start_server(
        db_url, tmp_path, dispatch_enabled=False, watch_streams_per_principal=STREAMS
    )
    # One connection per subscriber, as separate processes would have (HTTP/2 caps
    # concurrent streams per connection).
    calls = [
        server.stub("oscar").WatchEvents(pb.WatchEventsRequest(replay_history=True), timeout=None)
        for _ in range(STREAMS)
    ]
    try:
        sent = await server.stub("alice").SendNotification(send_request())

        async def first_event(call: object) -> str:
            async for response in call:  # type: ignore[attr-defined]
                if response.HasField("event"):
                    return str(response.event.notification_id)
            return ""

        got = await asyncio.wait_for(asyncio.gather(*(first_event(c) for c in calls)), 120)
        assert got == [sent.notification_id] * STREAMS
        assert server.app.hub.subscribers == STREAMS
    finally:
        for call in calls:
            call.cancel()
        await server.stop()


@pytest.mark.parametrize(
    "bound",
    [
        {"watch_queue_max": 5},
        # Bounded in bytes alone: ~4 events' worth, whatever the event count allows.
        {"watch_queue_max_bytes": 2048},
    ],
    ids=["events", "bytes"],
)
async def test_slow_subscriber_falls_back_to_the_table_and_misses_nothing(
    db_url: str, tmp_path: Path, bound: dict[str, int]
) -> None:
    server = await start_server(db_url, tmp_path, **bound)
    alice = server.stub("alice")
    # A small, fixed HTTP/2 window so the transport cannot absorb the backlog for us.
    channel = grpc.aio.insecure_channel(
        server.target, options=[("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 0)]
    )
    stub = pb_grpc.NotificationServiceStub(channel)
    call = stub.WatchEvents(
        pb.WatchEventsRequest(replay_history=True),
        metadata=(("authorization", f"Bearer {KEYS['oscar']}"),),
    )
    try:
        stream = aiter(call)
        sent = await alice.SendNotification(send_request(idempotency_key="first"))
        ids = [sent.notification_id]
        first = await anext(stream)
        while not first.HasField("event"):  # the stream's initial position
            first = await anext(stream)
        assert first.event.kind == t.EVENT_KIND_ACCEPTED
        # The subscriber stops reading while thousands of events commit.
        for i in range(400):
            reply = await alice.SendNotification(send_request(idempotency_key=f"n{i}"))
            ids.append(reply.notification_id)
        overflows = server.app.hub.total_overflows
        received = [first.event]
        while sum(e.kind == t.EVENT_KIND_DELIVERY_RESULT for e in received) < len(ids):
            response = await asyncio.wait_for(anext(stream), 60)
            if response.HasField("event"):
                received.append(response.event)
    finally:
        call.cancel()
        await channel.close()
        await server.stop()
    sequences = [e.sequence for e in received]
    assert sequences == list(range(sequences[0], sequences[0] + len(sequences)))  # no gaps
    assert {e.notification_id for e in received} == set(ids)
    assert overflows >= 1  # it really fell behind its small buffer
