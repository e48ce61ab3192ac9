"""A snooze's end asks the person again (SPEC §7 "Quiet on purpose"), through gRPC on
SQLite and PostgreSQL, with the reminder rig of ``test_followups`` (the clock moved by
the test, the workers stepped with ``run_once``): the reminder goes out at once on a
reminder's channels, even for a policy without reminders of its own, once across two
replicas and across a restart; it is told apart from the policy's reminders in
WatchEvents and GetNotification; each snooze has its own; the deadline keeps the time
it had left; a step the pause left waiting to retry is closed STOPPED, not sent twice."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.api.test_followups import Rig, minutes, started_rig
from tests.api.test_snooze import snooze
from tests.support.http_receiver import Reply
from tests.support.policies import activate_policy
from tests.support.server import RunningServer, send_request, start_server
from tests.support.watching import events_until
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t
from uns_server.domain.enums import DeliveryMode

PLAIN = "ops.asked"  # acknowledged, no reminder nor escalation step of its own


async def delivered_plain(rig: Rig, db_url: str) -> tuple[str, datetime]:
    sent = await rig.server.stub("alice").SendNotification(send_request(notification_type=PLAIN))
    assert (await rig.server.app.dispatcher.run_once()).claimed == 1
    n = await rig.get(sent.notification_id)
    assert n.ack_state == t.ACK_STATE_PENDING
    return sent.notification_id, n.deliver_time.ToDatetime(tzinfo=UTC)


async def plain_policy(db_url: str) -> None:
    await activate_policy(
        db_url,
        PLAIN,
        channels=["hook"],
        delivery_mode=DeliveryMode.GUARANTEED,
        require_ack=True,
        ack_timeout_minutes=60,
    )


async def test_the_end_asks_again_once_across_replicas_and_the_deadline_keeps_its_time(
    db_url: str, tmp_path: Path
) -> None:
    await plain_policy(db_url)
    async with started_rig(db_url, tmp_path) as rig:
        nid, d = await delivered_plain(rig, db_url)
        rig.at(d + minutes(5))
        await rig.server.stub("rita").SnoozeNotification(snooze(nid, minutes(30)))
        rig.at(d + minutes(35) + timedelta(seconds=1))
        await rig.server.app.timers.run_once()  # the snooze ends

        other = rig.replica()
        [claim], _ = await rig.worker.claim()
        assert (await other.claim())[0] == []  # leased: the other replica skips it
        await rig.worker.deliver(claim)
        for worker in (rig.worker, other):
            assert (await worker.run_once()).fired == 0  # sent once, nothing after it
        [_, asked] = await rig.hook.wait_for_requests(2)
        data = asked.json()["data"]
        assert data["follow_up"] == {"kind": "SNOOZE_REMINDER", "number": 1}
        assert data["title"].startswith("Reminder (snooze ended): ")
        assert asked.headers["webhook-id"] == f"{nid}:hook:snooze_reminder:1"

        n = await rig.get(nid)
        assert n.reminders_sent == 0  # none of the policy's reminders
        [ref] = [r for r in n.provider_references if r.follow_up]
        assert (ref.follow_up, ref.follow_up_number) == ("SNOOZE_REMINDER", 1)

        # 55 minutes were left when snoozed: the deadline passes at 90, not 60.
        rig.at(d + minutes(89))
        await rig.server.app.timers.run_once()
        assert (await rig.get(nid)).ack_state == t.ACK_STATE_PENDING
        rig.at(d + minutes(90) + timedelta(seconds=1))
        await rig.server.app.timers.run_once()
        assert (await rig.get(nid)).ack_state == t.ACK_STATE_TIMED_OUT
        events = await rig.events(nid, t.EVENT_KIND_TIMED_OUT)
        ended = next(e for e in events if e.kind == t.EVENT_KIND_SNOOZE_ENDED)
        assert ended.payload["snooze"] == 1
        [reminded] = [e for e in events if e.kind == t.EVENT_KIND_REMINDER_SENT]
        assert reminded.payload["follow_up"] == "SNOOZE_REMINDER"
        assert reminded.payload["snooze"] == 1 and reminded.payload["decision"] == "SENT"
        assert reminded.payload["provider_effect_may_have_occurred"] is False
        assert len(rig.hook.requests) == 2


async def test_each_snooze_has_its_reminder_and_the_policy_steps_keep_their_times(
    db_url: str, tmp_path: Path
) -> None:
    async with started_rig(db_url, tmp_path) as rig:  # reminders at 10, 30; steps 20, 45
        nid, d = await rig.delivered()
        rig.at(d + minutes(2))
        await rig.server.stub("rita").SnoozeNotification(snooze(nid, minutes(3)))
        rig.at(d + minutes(5) + timedelta(seconds=1))
        await rig.server.app.timers.run_once()
        assert (await rig.worker.run_once()).fired == 1  # asked again, then nothing till 13
        assert (await rig.worker.run_once()).fired == 0
        n = await rig.get(nid)
        assert n.next_follow_up_time.ToDatetime(tzinfo=UTC) == d + minutes(13)
        await rig.server.stub("rita").SnoozeNotification(snooze(nid, minutes(2)))
        rig.at(d + minutes(7) + timedelta(seconds=2))
        await rig.server.app.timers.run_once()
        assert (await rig.worker.run_once()).fired == 1
        rig.at(d + minutes(15) + timedelta(seconds=2))  # reminder 1: 10 + 3 + 2
        assert (await rig.worker.run_once()).fired == 1
        requests = await rig.hook.wait_for_requests(4)
        assert [r.json()["data"]["follow_up"] for r in requests[1:]] == [
            {"kind": "SNOOZE_REMINDER", "number": 1},
            {"kind": "SNOOZE_REMINDER", "number": 2},
            {"kind": "REMINDER", "number": 1},
        ]
        assert len({r.headers["webhook-id"] for r in requests}) == 4
        assert (await rig.get(nid)).reminders_sent == 1


async def restart(db_url: str, tmp_path: Path, rig: Rig) -> RunningServer:
    channels = str(tmp_path / "channels.yaml")  # the rig's
    return await start_server(
        db_url, tmp_path, clock=rig.clock, channels_file=channels, dispatch_enabled=False
    )


async def test_a_restart_sends_the_reminder_once(db_url: str, tmp_path: Path) -> None:
    await plain_policy(db_url)
    async with started_rig(db_url, tmp_path) as rig:
        nid, d = await delivered_plain(rig, db_url)
        await rig.server.stub("rita").SnoozeNotification(snooze(nid, minutes(30)))
        clock, hook = rig.clock, rig.hook
        # A new process on the same database (the first one does nothing more).
        restarted = await restart(db_url, tmp_path, rig)
        try:
            clock.offset += d + minutes(31) - clock()
            await restarted.app.timers.run_once()
            assert (await restarted.app.followups.run_once()).fired == 1
            assert (await restarted.app.followups.run_once()).fired == 0
        finally:
            await restarted.stop()
        again = await restart(db_url, tmp_path, rig)
        try:  # restarted once more after it was sent: nothing is sent twice
            await again.app.timers.run_once()
            assert (await again.app.followups.run_once()).fired == 0
            reply = await again.stub("oscar").GetNotification(
                pb.GetNotificationRequest(notification_id=nid)
            )
            assert reply.notification.ack_state == t.ACK_STATE_PENDING
        finally:
            await again.stop()
        [_, asked] = await hook.wait_for_requests(2)
        assert asked.json()["data"]["follow_up"]["kind"] == "SNOOZE_REMINDER"
        assert len(hook.requests) == 2


async def test_a_step_left_waiting_to_retry_by_the_pause_is_stopped_then_asked_again(
    db_url: str, tmp_path: Path
) -> None:
    async with started_rig(db_url, tmp_path) as rig:  # reminder 1 at 10 minutes
        nid, d = await rig.delivered()
        rig.at(d + minutes(10) + timedelta(seconds=1))
        rig.hook.script(Reply(status=503))  # reminder 1 fails transiently: it waits
        assert (await rig.worker.run_once()).fired == 1
        await rig.server.stub("rita").SnoozeNotification(snooze(nid, minutes(2)))
        rig.at(d + minutes(12) + timedelta(seconds=2))
        await rig.server.app.timers.run_once()  # ended before its retry was claimed
        assert (await rig.worker.run_once()).fired == 1  # the snooze's reminder only
        assert (await rig.worker.run_once()).fired == 0
        requests = await rig.hook.wait_for_requests(3)
        assert [r.json()["data"]["follow_up"]["kind"] for r in requests[1:]] == [
            "REMINDER",
            "SNOOZE_REMINDER",
        ]
        events = await events_until(
            rig.server.stub("oscar"),
            pb.WatchEventsRequest(replay_history=True, notification_ids=[nid]),
            lambda seen: sum(e.kind == t.EVENT_KIND_REMINDER_SENT for e in seen) == 2,
        )
        stopped, asked = [e for e in events if e.kind == t.EVENT_KIND_REMINDER_SENT]
        assert (stopped.payload["number"], stopped.payload["decision"]) == (1, "STOPPED")
        assert (asked.payload["follow_up"], asked.payload["decision"]) == (
            "SNOOZE_REMINDER",
            "SENT",
        )
        assert (await rig.get(nid)).reminders_sent == 1
