"""Several servers on one PostgreSQL behave as one service: events committed through
one replica are pushed to subscribers of another (LISTEN/NOTIFY), and any replica
can acknowledge."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.conftest import PostgresDatabases
from tests.support.server import RunningServer, send_request, start_server
from tests.support.watching import events_until, has_kind
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t


@pytest.fixture
async def replicas(
    postgres: PostgresDatabases, tmp_path: Path
) -> AsyncIterator[tuple[RunningServer, RunningServer]]:
    url = await postgres.new()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = await start_server(url, tmp_path / "a")
    # Dispatch only on `a`: `b` can learn of deliveries only through PostgreSQL.
    b = await start_server(url, tmp_path / "b", dispatch_enabled=False)
    try:
        yield a, b
    finally:
        await b.stop()
        await a.stop()


async def test_watch_on_one_replica_sees_commits_of_another(
    replicas: tuple[RunningServer, RunningServer],
) -> None:
    a, b = replicas
    watcher = b.stub("oscar")
    sent = await a.stub("alice").SendNotification(
        send_request(require_ack=True, wait_for_first_attempt=True)
    )
    assert sent.state == t.NOTIFICATION_STATE_DELIVERED
    seen = await events_until(
        watcher,
        pb.WatchEventsRequest(replay_history=True),
        has_kind(sent.notification_id, t.EVENT_KIND_DELIVERY_RESULT),
    )
    assert {e.notification_id for e in seen} == {sent.notification_id}

    # A live stream on b, positioned after everything so far, is woken by an
    # acknowledgement committed through a.
    live = watcher.WatchEvents(
        pb.WatchEventsRequest(after_sequence=seen[-1].sequence), timeout=None
    )
    try:
        await a.stub("rita").Acknowledge(
            pb.AcknowledgeRequest(notification_id=sent.notification_id)
        )
        async for response in live:
            if response.HasField("event"):
                assert response.event.kind == t.EVENT_KIND_ACKED
                assert response.event.sequence == seen[-1].sequence + 1
                break
    finally:
        live.cancel()


async def test_replicas_share_the_queue_without_double_delivery(
    replicas: tuple[RunningServer, RunningServer], tmp_path: Path
) -> None:
    a, b = replicas
    (tmp_path / "c").mkdir()
    c = await start_server(a.app.settings.database_url, tmp_path / "c")  # a second worker pool
    try:
        ids = [
            (
                await b.stub("alice").SendNotification(send_request(idempotency_key=f"q{i}"))
            ).notification_id
            for i in range(30)
        ]
        seen = await events_until(
            b.stub("oscar"),
            pb.WatchEventsRequest(replay_history=True, kinds=[t.EVENT_KIND_DELIVERY_RESULT]),
            lambda evs: len(evs) >= len(ids),
        )
        assert sorted(e.notification_id for e in seen) == sorted(ids)
        assert all(e.payload["status"] == "DELIVERED" and e.payload["attempt"] == 1 for e in seen)
    finally:
        await c.stop()
