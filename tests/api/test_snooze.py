"""SnoozeNotification through gRPC on SQLite (SPEC §7 "Quiet on purpose"), with
the reminder/escalation rig of ``test_followups`` (the clock moved by the test, the
workers stepped with ``run_once``): a snooze pauses the reminders, the escalation steps
and the deadline; at its end the ack is PENDING again, the steps resume shifted by the
pause and the deadline has the time it had left; the answer stays owed meanwhile; the
refusals are an answer's, plus the duration's range; a restart keeps the snooze."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from tests.api.test_followups import Rig, minutes, rig, started_rig
from tests.support.server import start_server
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t

__all__ = ["rig"]  # the rig fixture of test_followups, used here too


def near(stamp: Timestamp, expected: datetime) -> bool:
    """The test's clock runs on between the instants it sets: a few seconds' slack."""
    return abs(stamp.ToDatetime(tzinfo=UTC) - expected) < timedelta(seconds=5)


def snooze(nid: str, duration: timedelta) -> pb.SnoozeNotificationRequest:
    d = Duration()
    d.FromTimedelta(duration)
    return pb.SnoozeNotificationRequest(notification_id=nid, duration=d)


async def test_a_snooze_pauses_steps_and_deadline_and_resumes_them(
    db_url: str, tmp_path: Path
) -> None:
    async with started_rig(db_url, tmp_path) as rig:
        nid, d = await rig.delivered()
        await rig.worker.run_once()  # nothing due yet
        rig.at(d + minutes(5))
        reply = await rig.server.stub("rita").SnoozeNotification(snooze(nid, minutes(30)))
        n = reply.notification
        assert n.ack_state == t.ACK_STATE_SNOOZED
        assert near(n.snooze_until_time, d + minutes(35))
        assert near(n.ack_deadline_time, d + minutes(90))  # 60 + 30

        # Reminder 1 was due at 10 minutes, step 1 at 20: both paused.
        rig.at(d + minutes(25))
        assert (await rig.worker.run_once()).fired == 0
        await rig.server.app.timers.run_once()
        assert (await rig.get(nid)).ack_state == t.ACK_STATE_SNOOZED
        assert len(rig.hook.requests) == 1 and not rig.pager.requests  # the delivery only

        rig.at(d + minutes(35) + timedelta(seconds=1))
        await rig.server.app.timers.run_once()  # the snooze ends
        assert (await rig.get(nid)).ack_state == t.ACK_STATE_PENDING
        assert (await rig.worker.run_once()).fired == 1  # asked again at once
        assert (await rig.worker.run_once()).fired == 0  # reminder 1 now at 40
        [_, asked] = await rig.hook.wait_for_requests(2)
        assert asked.json()["data"]["follow_up"] == {"kind": "SNOOZE_REMINDER", "number": 1}
        rig.at(d + minutes(40) + timedelta(seconds=1))
        assert (await rig.worker.run_once()).fired == 1
        assert (await rig.worker.run_once()).fired == 0  # one chain of follow-ups, not two
        [_, _, reminder] = await rig.hook.wait_for_requests(3)
        assert reminder.json()["data"]["follow_up"] == {"kind": "REMINDER", "number": 1}

        # The deadline had 55 minutes left when snoozed: it passes at 90, not 60.
        rig.at(d + minutes(89))
        await rig.server.app.timers.run_once()
        assert (await rig.get(nid)).ack_state == t.ACK_STATE_PENDING
        rig.at(d + minutes(90) + timedelta(seconds=1))
        await rig.server.app.timers.run_once()
        assert (await rig.get(nid)).ack_state == t.ACK_STATE_TIMED_OUT

        events = await rig.events(nid, t.EVENT_KIND_TIMED_OUT)
        snoozed = next(e for e in events if e.kind == t.EVENT_KIND_SNOOZED)
        assert snoozed.payload["actor"] == "rita" and snoozed.payload["via"] == "grpc"
        assert snoozed.payload["duration_seconds"] == 1800
        assert t.EVENT_KIND_SNOOZE_ENDED in [e.kind for e in events]


async def test_the_answer_stays_owed_while_snoozed(rig: Rig) -> None:
    nid, d = await rig.delivered()
    await rig.server.stub("rita").SnoozeNotification(snooze(nid, minutes(30)))
    acked = await rig.server.stub("rita").Acknowledge(pb.AcknowledgeRequest(notification_id=nid))
    assert acked.notification.ack_state == t.ACK_STATE_ACKED
    assert not acked.notification.HasField("snooze_until_time")
    rig.at(d + minutes(31))
    await rig.server.app.timers.run_once()  # the stale snooze end does nothing
    assert (await rig.get(nid)).ack_state == t.ACK_STATE_ACKED
    with pytest.raises(grpc.aio.AioRpcError) as refused:  # settled: an answer's refusal
        await rig.server.stub("rita").SnoozeNotification(snooze(nid, minutes(5)))
    assert refused.value.code() == grpc.StatusCode.ABORTED  # ACK_CONFLICT


async def test_a_snoozed_ack_can_be_withdrawn_and_snoozed_again(rig: Rig) -> None:
    nid, d = await rig.delivered()
    await rig.server.stub("rita").SnoozeNotification(snooze(nid, minutes(30)))
    again = await rig.server.stub("rita").SnoozeNotification(snooze(nid, minutes(10)))
    n = again.notification
    assert near(n.snooze_until_time, d + minutes(10))
    assert near(n.ack_deadline_time, d + minutes(70))  # the pause: 10
    await rig.server.stub("alice").WithdrawNotification(
        pb.WithdrawNotificationRequest(notification_id=nid, reason="fixed")
    )
    assert (await rig.get(nid)).ack_state == t.ACK_STATE_WITHDRAWN


@pytest.mark.parametrize("seconds", [0, 86401])
async def test_a_duration_out_of_range_is_refused(rig: Rig, seconds: int) -> None:
    nid, _ = await rig.delivered()
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await rig.server.stub("rita").SnoozeNotification(snooze(nid, timedelta(seconds=seconds)))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "duration" in (refused.value.details() or "")


async def test_who_may_snooze_is_who_may_answer(rig: Rig) -> None:
    nid, _ = await rig.delivered()
    with pytest.raises(grpc.aio.AioRpcError) as refused:  # a producer does not answer
        await rig.server.stub("alice").SnoozeNotification(snooze(nid, minutes(5)))
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.aio.AioRpcError) as unknown:
        await rig.server.stub("rita").SnoozeNotification(snooze("0" * 8, minutes(5)))
    assert unknown.value.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT)
    snoozed = await rig.server.stub("oscar").SnoozeNotification(snooze(nid, minutes(5)))
    assert snoozed.notification.ack_state == t.ACK_STATE_SNOOZED


async def test_a_restart_keeps_the_snooze_and_ends_it(db_url: str, tmp_path: Path) -> None:
    async with started_rig(db_url, tmp_path) as rig:
        nid, d = await rig.delivered()
        await rig.server.stub("rita").SnoozeNotification(snooze(nid, minutes(30)))
        clock = rig.clock
    restarted = await start_server(db_url, tmp_path, clock=clock, dispatch_enabled=False)
    try:
        clock.offset += d + minutes(31) - clock()
        await restarted.app.timers.run_once()
        reply = await restarted.stub("oscar").GetNotification(
            pb.GetNotificationRequest(notification_id=nid)
        )
        assert reply.notification.ack_state == t.ACK_STATE_PENDING
    finally:
        await restarted.stop()
