"""Reminders to people (SPEC §6, issue 31 items 4 and 8) through a real server, on
SQLite, with a movable clock: each person's reminders taper on their
own count (seed 003's nag state), so a person asked again by an escalation step is not
reminded until their own interval has passed; a person in their own quiet hours is
not reminded then, and a reminder step that asks nobody else is SKIPPED."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tests.http.conftest import Rig
from tests.http.test_people_quiet_hours import ZONE, person, wall
from tests.support.people import acked_spec, minutes, put_policy, put_recipients
from tests.support.watching import events_until
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t

TYPE = "ops.nag"


async def deliver(rig: Rig) -> tuple[str, datetime]:
    nid = await rig.send("nag-1", notification_type=TYPE)
    assert await rig.deliver() == 1
    n = await rig.get(nid)
    assert n.state == t.NOTIFICATION_STATE_DELIVERED
    return nid, n.deliver_time.ToDatetime(tzinfo=UTC)


async def step_at(rig: Rig, d: datetime, offset: float) -> int:
    rig.clock.offset += d + timedelta(minutes=offset) - rig.clock()
    return (await rig.server.app.followups.run_once()).fired


async def reminders(rig: Rig, nid: str, count: int) -> list[Any]:
    events = await events_until(
        rig.server.stub("oscar"),
        pb.WatchEventsRequest(replay_history=True, notification_ids=[nid]),
        lambda evs: sum(e.kind == t.EVENT_KIND_REMINDER_SENT for e in evs) >= count,
    )
    return [e.payload for e in events if e.kind == t.EVENT_KIND_REMINDER_SENT]


def subjects(rig: Rig) -> list[tuple[str, str]]:
    return [(m["To"], m["Subject"].removeprefix("[NORMAL] ")) for m in rig.smtp.messages]


async def test_each_person_is_reminded_on_their_own_count(rig: Rig) -> None:
    await put_recipients(rig.server, [person("alice"), person("bob")])
    # Reminders at +10, +40, +130 (each interval three times the last); alice is
    # paged again by the escalation step at +35.
    await put_policy(
        rig.server,
        TYPE,
        acked_spec(
            targets=[t.Target(recipient_id="alice"), t.Target(recipient_id="bob")],
            reminder=t.Reminder(first_after=minutes(10), multiplier=3, max_count=3),
            escalation=[
                t.EscalationStep(after=minutes(35), targets=[t.Target(recipient_id="alice")])
            ],
        ),
    )
    nid, d = await deliver(rig)
    per_step = []
    for offset in (10, 35, 40, 130):
        before = len(rig.smtp.messages)
        assert await step_at(rig, d, offset) == 1
        per_step.append(sorted(subjects(rig)[before:]))
    assert await step_at(rig, d, 239) == 0
    assert per_step == [
        [
            ("alice@example.com", "Reminder 1: Disk almost full"),
            ("bob@example.com", "Reminder 1: Disk almost full"),
        ],
        [("alice@example.com", "Escalation step 1: Disk almost full")],
        # +40: bob is due (10 + 3 * 10); alice, paged at +35, not before +65.
        [("bob@example.com", "Reminder 2: Disk almost full")],
        # +130: bob's third; alice's second (her count is 1, not the obligation's 2).
        [
            ("alice@example.com", "Reminder 3: Disk almost full"),
            ("bob@example.com", "Reminder 3: Disk almost full"),
        ],
    ]
    sent = await reminders(rig, nid, 3)
    assert [sorted(p["recipient_ids"]) for p in sent] == [
        ["alice", "bob"],
        ["bob"],
        ["alice", "bob"],
    ]
    assert [dict(w) for w in sent[1]["recipients_not_due"]] == [
        {"recipient_id": "alice", "due_time": (d + timedelta(minutes=65)).isoformat()}
    ]
    n = await rig.get(nid)
    assert n.reminders_sent == 3
    assert {r.recipient_id: r.reminders_sent for r in n.recipients} == {"alice": 2, "bob": 3}


async def test_a_person_is_not_reminded_in_their_quiet_hours(rig: Rig) -> None:
    now = rig.clock()
    night = t.QuietHours(
        time_zone=ZONE,
        start=wall(now + timedelta(minutes=5)),
        end=wall(now + timedelta(minutes=20)),
    )
    await put_recipients(rig.server, [person("alice", night)])
    await put_policy(
        rig.server,
        TYPE,
        acked_spec(
            targets=[t.Target(recipient_id="alice")],
            reminder=t.Reminder(first_after=minutes(10), multiplier=1, max_count=3),
        ),
    )
    nid, d = await deliver(rig)
    for offset in (10, 20, 30):
        assert await step_at(rig, d, offset) == 1
    assert subjects(rig) == [
        ("alice@example.com", "Disk almost full"),
        ("alice@example.com", "Reminder 2: Disk almost full"),
        ("alice@example.com", "Reminder 3: Disk almost full"),
    ]
    first, second, third = await reminders(rig, nid, 3)
    assert (first["decision"], list(first["channels"])) == ("SKIPPED", [])
    [held] = first["recipients_held"]
    assert held["recipient_id"] == "alice"
    assert datetime.fromisoformat(held["held_until"]) <= d + timedelta(minutes=20)
    assert (second["decision"], third["decision"]) == ("SENT", "SENT")
    n = await rig.get(nid)
    assert n.reminders_sent == 3
    [alice] = n.recipients
    assert alice.reminders_sent == 2
