"""A server that lacks a notification's channel neither takes it at intake (no lease
handed to its own dispatcher) nor claims it later: the notification waits, PENDING
with no attempt consumed, for a replica that has the channel. Both dialects."""

from __future__ import annotations

from tests.support.policies import activate_policy
from tests.support.server import RunningServer, send_request
from tests.support.watching import events_until, has_kind
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t
from uns_server.domain.enums import DeliveryMode
from uns_server.store import dispatch


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
    async with server.app.db.read() as conn:
        assert await dispatch.next_due_at(conn, server.app.channels.names()) is None
