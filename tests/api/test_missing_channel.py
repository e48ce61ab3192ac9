"""A server that lacks a notification's channel neither takes it at intake (no lease
handed to its own dispatcher) nor claims it later: the notification waits, PENDING
with no attempt consumed, for a replica that has the channel. Both dialects."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.observability.helpers import scrape
from tests.support.policies import activate_policy
from tests.support.server import RunningServer, ShiftableClock, send_request, start_server
from tests.support.watching import events_until, has_kind
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t
from uns_server.domain.enums import DeliveryMode


async def test_work_for_a_channel_this_server_lacks_is_left_pending(
    server: RunningServer,
) -> None:
    url = server.app.settings.database_url
    assert "hook" not in server.app.channels  # only the default ``log`` channel
    spec = {"delivery_mode": DeliveryMode.GUARANTEED, "require_ack": False}
    await activate_policy(url, "ops.hook", channels=["hook"], **spec)
    await activate_policy(url, "ops.log", channels=["log"], **spec)
    alice = server.stub("alice")
    # Sent while the dispatcher has free slots: intake would hand it over leased.
    lacking = (
        await alice.SendNotification(send_request(notification_type="ops.hook"))
    ).notification_id
    # Due after it: the claim that delivers this one has passed over the first.
    later = (
        await alice.SendNotification(send_request(notification_type="ops.log"))
    ).notification_id
    await server.app.dispatcher.run_once()  # a claim, on top of the running loop's
    seen = await events_until(
        server.stub("oscar"),
        pb.WatchEventsRequest(replay_history=True),
        has_kind(later, t.EVENT_KIND_DELIVERY_RESULT),
    )
    assert {e.kind for e in seen if e.notification_id == lacking} == {t.EVENT_KIND_ACCEPTED}
    got = (
        await server.stub("oscar").GetNotification(
            pb.GetNotificationRequest(notification_id=lacking)
        )
    ).notification
    assert (got.state, got.attempts, got.dead_letter) == (t.NOTIFICATION_STATE_PENDING, 0, False)
    # Nor does it look due to this dispatcher (whose idle wait would shrink to nothing:
    # a claim loop spinning on work it may not take).
    async with server.app.store.read() as tx:
        assert await tx.dispatch.next_due_at(server.app.channels.names()) is None


STUCK_LINE = "notification due but no replica delivers its channel"


async def test_work_no_replica_delivers_is_counted_by_channel_and_logged_once(
    db_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """SPEC §6: a policy written before its channel was removed from the configuration
    (PutPolicyRevision refuses it now): the gauge counts the work by channel, a warning
    names the notification, once per interval, and both clear once it is withdrawn."""
    clock = ShiftableClock()
    server = await start_server(db_url, tmp_path, clock=clock, metrics_listen="127.0.0.1:0")
    try:
        spec = {"delivery_mode": DeliveryMode.GUARANTEED, "require_ack": False}
        await activate_policy(db_url, "ops.hook", channels=["log", "hook", "pager"], **spec)
        alice = server.stub("alice")
        sent = await alice.SendNotification(send_request(notification_type="ops.hook"))
        nid = sent.notification_id
        watch = server.app.undeliverable
        assert (await watch.run_once()).counts == {}  # just due: a replica with it may yet claim it
        clock.advance(minutes=5)
        with caplog.at_level(logging.WARNING, logger="uns.dispatch"):
            assert (await watch.run_once()).counts == {"hook": 1, "pager": 1}
            assert (await watch.run_once()).counts == {"hook": 1, "pager": 1}
        lines = [r for r in caplog.records if r.getMessage() == STUCK_LINE]
        assert [(r.__dict__["notification_id"], r.__dict__["channels"]) for r in lines] == [
            (nid, "hook,pager")
        ]
        assert lines[0].__dict__["due_for_seconds"] >= 300
        got = await scrape(server)
        assert got.value("uns_undeliverable_due_notifications", channel="hook") == 1
        assert got.value("uns_undeliverable_due_notifications", channel="pager") == 1
        assert got.value("uns_undeliverable_due_notifications", channel="log") == 0

        await alice.WithdrawNotification(
            pb.WithdrawNotificationRequest(notification_id=nid, reason="no such channel")
        )
        assert (await watch.run_once()).counts == {}
        assert not (await scrape(server)).has("uns_undeliverable_due_notifications")
    finally:
        await server.stop()
