"""An answer racing a person's in-flight messages (SPEC §6 "Answers close the loop",
issue 31 items 4 and 6), on SQLite: the person answers from inside
the provider call that carries their Slack direct message, before UNS has the
message's reference; their PagerDuty incident is opened by the same attempt. Both
are still closed (``chat.update``, PagerDuty ``resolve``) once the attempt has
settled, and only once."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from aiohttp import web

from tests.support.people import acked_spec, minutes, put_people, put_policy
from tests.support.server import KEYS, RunningServer, ShiftableClock, send_request, start_server
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import notification_service_pb2_grpc as pb_grpc
from uns.v1 import types_pb2 as t
from uns_server.store.jobs import SqlJobs

TYPE = "ops.race"


class Providers:
    """Slack Web API and PagerDuty Events v2 on one loopback app; a direct message to
    ``answer_from`` is acknowledged by that person before Slack answers."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.target = ""
        self.notification_id = ""
        self.answer_from = "U0ALICE"
        self.answered: list[t.AckState.ValueType] = []
        self.posted: list[tuple[str, str]] = []  # (channel, ts) of each message posted
        self._ts = itertools.count(1)

    async def slack(self, request: web.Request) -> web.Response:
        method, body = request.match_info["method"], await request.json()
        self.calls.append((method, body))
        if method == "chat.update":
            return web.json_response({"ok": True, "channel": body["channel"], "ts": body["ts"]})
        ts = f"1700000000.{next(self._ts):06d}"
        channel = body["channel"]
        if channel == "U0ALICE":  # Slack opens the direct message
            channel = "D0ALICE"
            if self.answer_from == "U0ALICE":  # she answers before Slack does
                await self.acknowledge()
        self.posted.append((channel, ts))
        return web.json_response({"ok": True, "channel": channel, "ts": ts})

    async def acknowledge(self) -> None:
        async with grpc.aio.insecure_channel(self.target) as channel:
            reply = await pb_grpc.NotificationServiceStub(channel).Acknowledge(
                pb.AcknowledgeRequest(notification_id=self.notification_id),
                metadata=(("authorization", f"Bearer {KEYS['rita']}"),),
            )
        self.answered.append(reply.notification.ack_state)

    async def pagerduty(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.calls.append(("pagerduty:" + body["event_action"], body))
        return web.json_response(
            {"status": "success", "message": "Event processed", "dedup_key": body["dedup_key"]},
            status=202,
        )

    def called(self, method: str) -> list[dict[str, Any]]:
        return [body for m, body in self.calls if m == method]


@pytest.fixture
async def race(db_url: str, tmp_path: Path) -> AsyncIterator[tuple[RunningServer, Providers]]:
    providers = Providers()
    app = web.Application()
    app.router.add_post("/slack/api/{method}", providers.slack)
    app.router.add_post("/pagerduty/v2/enqueue", providers.pagerduty)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    channels = tmp_path / "channels.yaml"
    channels.write_text(
        f"""
alerts-slack:
  type: slack
  token: xoxb-test-token
  channel: "#alerts"
  base_url: {base}/slack/api
pager:
  type: pagerduty
  routing_key: R0UTINGKEY
  base_url: {base}/pagerduty
"""
    )
    server = await start_server(
        db_url,
        tmp_path,
        clock=ShiftableClock(),
        channels_file=str(channels),
        dispatch_enabled=False,
    )
    providers.target = server.target
    try:
        yield server, providers
    finally:
        await server.stop()
        await runner.cleanup()


async def setup(server: RunningServer, **spec: Any) -> None:
    await put_people(server, {"alice": [("alerts-slack", "U0ALICE"), ("pager", "PALICE1")]})
    await put_policy(
        server,
        TYPE,
        acked_spec(
            channels=["alerts-slack"],
            targets=[t.Target(recipient_id="alice")],
            ack_timeout_minutes=30,
            **spec,
        ),
    )


async def test_a_persons_messages_in_flight_when_answered_are_closed_once_sent(
    race: tuple[RunningServer, Providers],
) -> None:
    server, providers = race
    await setup(server)
    sent = await server.stub("alice").SendNotification(send_request(notification_type=TYPE))
    providers.notification_id = sent.notification_id
    assert (await server.app.dispatcher.run_once()).claimed == 1
    assert providers.answered == [t.ACK_STATE_ACKED]  # honoured while in flight

    n = (
        await server.stub("oscar").GetNotification(
            pb.GetNotificationRequest(notification_id=sent.notification_id)
        )
    ).notification
    assert (n.state, n.ack_state) == (t.NOTIFICATION_STATE_DELIVERED, t.ACK_STATE_ACKED)
    [alice] = n.recipients
    assert sorted(alice.channels_accepted) == ["alerts-slack", "pager"]

    updater = server.app.message_updater
    while (await updater.run_once()).done:
        pass  # the stand-in queues the person's updates, which then go out
    updates = providers.called("chat.update")
    assert sorted(u["channel"] for u in updates) == ["#alerts", "D0ALICE"]
    [resolved] = providers.called("pagerduty:resolve")
    [opened] = providers.called("pagerduty:trigger")
    assert resolved["dedup_key"] == opened["dedup_key"]
    assert (await updater.run_once()).done == 0  # nothing twice
    assert len(providers.called("chat.update")) == 2


async def test_a_persons_reminder_in_flight_when_answered_is_closed_once_sent(
    race: tuple[RunningServer, Providers],
) -> None:
    """The same race on a reminder: its references are written when the step settles,
    after the answer; every message (delivery and reminder, shared and Alice's) is
    still closed once."""
    server, providers = race
    await setup(server, reminder=t.Reminder(first_after=minutes(10), multiplier=1, max_count=1))
    providers.answer_from = ""  # not at the delivery
    sent = await server.stub("alice").SendNotification(send_request(notification_type=TYPE))
    providers.notification_id = sent.notification_id
    assert (await server.app.dispatcher.run_once()).claimed == 1
    assert providers.answered == []

    providers.answer_from = "U0ALICE"  # she answers from inside her reminder's call
    clock = server.app.clock
    assert isinstance(clock, ShiftableClock)
    clock.advance(minutes=10, seconds=1)
    assert (await server.app.followups.run_once()).fired == 1
    assert providers.answered == [t.ACK_STATE_ACKED]

    updater = server.app.message_updater
    while (await updater.run_once()).done:
        pass
    assert len(providers.posted) == 4  # the delivery and the reminder, shared and Alice's
    updated = [(u["channel"], u["ts"]) for u in providers.called("chat.update")]
    assert sorted(updated) == sorted(providers.posted)
    assert len(providers.called("pagerduty:resolve")) == 2  # both of Alice's incidents
    assert (await updater.run_once()).done == 0


async def test_a_stand_in_settled_by_a_worker_that_died_queues_its_updates_once(
    race: tuple[RunningServer, Providers], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The updates an in-flight stand-in expands into are queued by the commit that
    settles it: a worker whose settle never commits leaves none queued, and the next
    worker, once the lease has expired, queues Alice's direct message update once."""
    server, providers = race
    await setup(server)
    sent = await server.stub("alice").SendNotification(send_request(notification_type=TYPE))
    providers.notification_id = sent.notification_id
    assert (await server.app.dispatcher.run_once()).claimed == 1
    assert providers.answered == [t.ACK_STATE_ACKED]

    async def dies(*_: object, **__: object) -> frozenset[int]:
        raise ConnectionResetError("the worker's database went away before its commit")

    updater = server.app.message_updater
    with monkeypatch.context() as patched:
        patched.setattr(SqlJobs, "settle_many", dies)
        with pytest.raises(ConnectionResetError):
            await updater.run_once()  # sent what it could, settled nothing
    clock = server.app.clock
    assert isinstance(clock, ShiftableClock)
    clock.advance(seconds=server.app.settings.lease_seconds + 1)
    await server.app.rescuer.run_once()  # the dead worker's jobs due again
    while (await updater.run_once()).done:
        pass
    to_alice = [u for u in providers.called("chat.update") if u["channel"] == "D0ALICE"]
    assert len(to_alice) == 1
    assert (await updater.run_once()).done == 0
