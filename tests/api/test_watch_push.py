"""Idle WatchEvents streams cost no database queries: the hub reads each commit once
and fans it out in memory; heartbeats come from memory too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import event

from tests.support.server import send_request, start_server
from uns.v1 import notification_service_pb2 as pb

SUBSCRIBERS = 20


async def test_idle_subscribers_do_not_poll_the_database(db_url: str, tmp_path: Path) -> None:
    server = await start_server(
        db_url, tmp_path, dispatch_enabled=False, watch_heartbeat_seconds=0.2
    )
    event_queries: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if "uns_events" in statement:
            event_queries.append(statement)

    engine = server.app.db.reader.sync_engine
    event.listen(engine, "before_cursor_execute", count)
    calls = [
        server.stub("oscar").WatchEvents(pb.WatchEventsRequest(), timeout=None)
        for _ in range(SUBSCRIBERS)
    ]
    try:
        heartbeats = 0
        for call in calls:  # every stream is up and past its catch-up query
            response = await anext(aiter(call))
            heartbeats += response.HasField("heartbeat")
        assert heartbeats == SUBSCRIBERS
        event_queries.clear()
        for call in calls:  # a few more heartbeats each: streams are alive and idle
            for _ in range(3):
                assert (await anext(aiter(call))).HasField("heartbeat")
        idle_queries = len(event_queries)

        sent = await server.stub("alice").SendNotification(send_request())
        for call in calls:  # one commit reaches every subscriber...
            async for response in call:
                if response.HasField("event"):
                    assert response.event.notification_id == sent.notification_id
                    break
        pushed_queries = len(event_queries) - idle_queries
    finally:
        for call in calls:
            call.cancel()
        event.remove(engine, "before_cursor_execute", count)
        await server.stop()
    # The hub's slow fallback poll may run once in a while; per-subscriber polling would
    # be at least one query per subscriber per heartbeat.
    assert idle_queries <= 2
    # ...through one read by the hub, not one per subscriber.
    assert pushed_queries <= 3
