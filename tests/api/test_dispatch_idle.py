"""An idle dispatcher keeps the next due time it read, until a commit says it may have
moved (workers/dispatch.py ``_next_due``): work accepted for earlier must still go out
at its time, not at the remembered one or the idle poll. Both dialects, real time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from google.protobuf import timestamp_pb2

from tests.support.server import send_request, start_server
from tests.support.watching import events_until, has_kind
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t

# Far beyond the wait below: a send found only by the idle poll would fail the test.
IDLE_POLL_SECONDS = 600.0


def _in(seconds: float) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(datetime.now(UTC) + timedelta(seconds=seconds))
    return ts


async def test_earlier_scheduled_send_goes_out_at_its_time(db_url: str, tmp_path: Path) -> None:
    srv = await start_server(db_url, tmp_path, idle_poll_seconds=IDLE_POLL_SECONDS)
    try:
        alice = srv.stub("alice")
        # The idle dispatcher reads "next due in an hour" and keeps it ...
        await alice.SendNotification(send_request(schedule_time=_in(3600)))
        # ... through deliveries that signal nothing (leased at intake, settled DELIVERED).
        for _ in range(3):
            now = await alice.SendNotification(send_request(wait_for_first_attempt=True))
            assert now.state == t.NOTIFICATION_STATE_DELIVERED
        soon = await alice.SendNotification(send_request(schedule_time=_in(1.5)))
        assert soon.state == t.NOTIFICATION_STATE_PENDING
        await events_until(
            alice,
            pb.WatchEventsRequest(replay_history=True, notification_ids=[soon.notification_id]),
            has_kind(soon.notification_id, t.EVENT_KIND_DELIVERY_RESULT),
        )
    finally:
        await srv.stop()
