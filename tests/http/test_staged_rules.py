"""A person's staged rules (SPEC §7 "Staged personal rules", issue 43 item 2) through a
real server on SQLite, against recording fakes: the delivery sends
only the contacts of the immediate rules; each later rule is a ``person_rule`` job
that sends its contact after its delay while the answer is still owed (time moved
with the rig's clock, the worker stepped with ``run_once``), and nothing once
answered; without rules of the notification's urgency every contact at once; the
staged rules are shown per person (GetNotification, the console) and planned by
Simulate."""

from __future__ import annotations

from datetime import UTC, timedelta

import httpx
import pytest
from google.protobuf.duration_pb2 import Duration

from tests.http.conftest import Rig
from tests.support.people import acked_spec, put_policy, put_recipients
from tests.support.server import KEYS, send_request
from tests.support.watching import events_until
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import recipient_service_pb2 as rpb
from uns.v1 import types_pb2 as t

TYPE = "ops.staged"
HIGH, LOW = t.URGENCY_HIGH, t.URGENCY_LOW


def after(**kwargs: float) -> Duration:
    out = Duration()
    out.FromTimedelta(timedelta(**kwargs))
    return out


def rule(contact: str, urgency: int, **delay: float) -> rpb.NotificationRule:
    return rpb.NotificationRule(contact=contact, after=after(**delay), urgency=urgency)


async def setup(rig: Rig, *rules: rpb.NotificationRule, urgency: int = 0) -> None:
    """Alice: a mail address, and a pager id reached through the webhook channel."""
    alice = rpb.Recipient(
        recipient_id="alice",
        display_name="Alice Martin",
        time_zone="UTC",
        contacts=[
            rpb.Contact(channel="mail", address="alice@example.com"),
            rpb.Contact(channel="hook", address="alice-pager"),
        ],
        notification_rules=list(rules),
    )
    await put_recipients(rig.server, [alice])
    spec = acked_spec(targets=[t.Target(recipient_id="alice")], ack_timeout_minutes=30)
    spec.urgency = urgency  # type: ignore[assignment]
    await put_policy(rig.server, TYPE, spec)


STAGED = (rule("mail", HIGH), rule("hook", HIGH, minutes=2), rule("mail", LOW))


async def send(rig: Rig, key: str, intent: str = "NOTIFICATION_INTENT_ACTION_REQUIRED") -> str:
    nid = await rig.send(key, notification_type=TYPE, intent=intent)
    assert await rig.deliver() == 1
    return nid


def pages(rig: Rig) -> list[str]:
    """The recipient ids of the messages the webhook channel received."""
    return [r.json()["data"]["recipient"]["recipient_id"] for r in rig.fakes.calls("/hook")]


async def fire(rig: Rig, **advance: float) -> tuple[int, int]:
    rig.clock.advance(**advance)
    done = await rig.server.app.person_rules.run_once()
    return done.fired, done.done


async def test_unanswered_the_later_contact_gets_its_message_after_its_delay(rig: Rig) -> None:
    await setup(rig, *STAGED)
    nid = await send(rig, "staged-1")  # ACTION_REQUIRED: HIGH by default
    assert [m["To"] for m in rig.smtp.messages] == ["alice@example.com"]
    assert pages(rig) == []  # the pager waits for its 2 minutes

    n = await rig.get(nid)
    [alice] = n.recipients
    [staged] = alice.staged_rules
    assert (staged.channel, staged.after.seconds) == ("hook", 120)
    assert staged.state == t.STAGED_RULE_STATE_PENDING
    # Due 2 minutes after the attempt that asked her (which settled as delivered).
    delivered = n.deliver_time.ToDatetime()
    assert delivered < staged.due_time.ToDatetime() <= delivered + timedelta(minutes=2)

    assert await fire(rig, seconds=60) == (0, 0)  # not due yet
    assert pages(rig) == []
    assert await fire(rig, seconds=61) == (1, 0)
    assert pages(rig) == ["alice"]
    [page] = rig.fakes.calls("/hook")
    assert page.json()["data"]["recipient"]["address"] == "alice-pager"

    n = await rig.get(nid)
    [alice] = n.recipients
    [staged] = alice.staged_rules
    assert staged.state == t.STAGED_RULE_STATE_SENT and staged.HasField("fire_time")
    assert "hook" in alice.channels_accepted
    assert {r.channel for r in alice.provider_references} == {"mail", "hook"}
    assert await fire(rig, minutes=10) == (0, 0)  # fired once
    assert len(pages(rig)) == 1

    events = await events_until(
        rig.server.stub("oscar"),
        pb.WatchEventsRequest(replay_history=True, notification_ids=[nid]),
        lambda seen: sum(e.kind == t.EVENT_KIND_CHANNEL_ATTEMPT_RESULT for e in seen) >= 2,
    )
    [result] = [
        e
        for e in events
        if e.kind == t.EVENT_KIND_CHANNEL_ATTEMPT_RESULT and "staged_rule" in e.payload
    ]
    assert (result.payload["recipient_id"], result.payload["channel"]) == ("alice", "hook")
    assert result.payload["route"] == "hook@alice:after:120"
    assert result.payload["staged_rule"]["after_seconds"] == 120
    assert result.payload["success"] is True
    started = [
        e
        for e in events
        if e.kind == t.EVENT_KIND_CHANNEL_ATTEMPT_STARTED and "staged_rule" in e.payload
    ]
    assert [e.payload["route"] for e in started] == ["hook@alice:after:120"]

    # The message closes with the obligation: the webhook is told of the answer.
    await rig.server.stub("oscar").Acknowledge(pb.AcknowledgeRequest(notification_id=nid))
    updated = await rig.server.app.message_updater.run_once()
    assert updated is not None
    settled = [r.json() for r in rig.fakes.calls("/hook")[1:]]
    assert [s["type"] for s in settled] == ["uns.notification.settled"]


async def test_answered_in_time_the_later_contact_gets_nothing(rig: Rig) -> None:
    await setup(rig, *STAGED)
    nid = await send(rig, "staged-2")
    await rig.server.stub("oscar").Acknowledge(pb.AcknowledgeRequest(notification_id=nid))
    assert await fire(rig, minutes=3) == (0, 1)  # stale: done, nothing sent
    assert pages(rig) == []
    [alice] = (await rig.get(nid)).recipients
    [staged] = alice.staged_rules
    assert staged.state == t.STAGED_RULE_STATE_STOPPED


async def test_withdrawn_the_later_contact_gets_nothing(rig: Rig) -> None:
    await setup(rig, *STAGED)
    nid = await send(rig, "staged-3")
    await rig.server.stub("alice").WithdrawNotification(
        pb.WithdrawNotificationRequest(notification_id=nid, reason="fixed")
    )
    assert await fire(rig, minutes=3) == (0, 1)
    assert pages(rig) == []


@pytest.mark.parametrize(
    ("rules", "intent"),
    [
        ((), "NOTIFICATION_INTENT_ACTION_REQUIRED"),  # no rules at all
        (STAGED[:2], "NOTIFICATION_INTENT_WARNING"),  # WARNING is LOW: no LOW rules
    ],
)
async def test_without_rules_of_its_urgency_every_contact_at_once(
    rig: Rig, rules: tuple[rpb.NotificationRule, ...], intent: str
) -> None:
    await setup(rig, *rules)
    nid = await send(rig, "staged-4", intent)
    assert [m["To"] for m in rig.smtp.messages] == ["alice@example.com"]
    assert pages(rig) == ["alice"]
    [alice] = (await rig.get(nid)).recipients
    assert sorted(alice.channels_accepted) == ["hook", "mail"]
    assert not alice.staged_rules
    assert await fire(rig, minutes=5) == (0, 0)  # no job was made


async def test_the_policy_urgency_picks_the_rules(rig: Rig) -> None:
    # LOW rules: the mail alone, nothing staged; the policy says LOW over the intent.
    await setup(rig, *STAGED, urgency=LOW)
    nid = await send(rig, "staged-5")
    assert [m["To"] for m in rig.smtp.messages] == ["alice@example.com"]
    assert pages(rig) == []
    [alice] = (await rig.get(nid)).recipients
    assert list(alice.channels_accepted) == ["mail"] and not alice.staged_rules
    assert await fire(rig, minutes=5) == (0, 0)


async def test_simulate_lists_each_rule_firing(rig: Rig) -> None:
    await setup(rig, *STAGED, rule("hook", HIGH, minutes=5))
    reply = await rig.server.stub("alice").Simulate(
        pb.SimulateRequest(
            request=send_request(
                notification_type=TYPE,
                idempotency_key="sim-1",
                intent="NOTIFICATION_INTENT_ACTION_REQUIRED",
            )
        )
    )
    rules = [s for s in reply.planned_steps if s.kind == pb.PLANNED_STEP_KIND_PERSON_RULE]
    assert [
        (s.number, s.offset.seconds, list(s.channels), list(s.recipient_ids)) for s in rules
    ] == [
        (1, 120, ["hook"], ["alice"]),
        (2, 300, ["hook"], ["alice"]),
    ]
    [delivery] = [s for s in reply.planned_steps if s.kind == pb.PLANNED_STEP_KIND_DELIVERY]
    assert [(m.channel, m.recipient_id) for m in delivery.messages] == [("mail", "alice")]
    assert [(m.channel, m.recipient_id) for m in rules[0].messages] == [("hook", "alice")]
    kinds = [s.kind for s in reply.planned_steps]
    assert kinds.index(pb.PLANNED_STEP_KIND_PERSON_RULE) < kinds.index(
        pb.PLANNED_STEP_KIND_DEADLINE
    )


async def test_the_console_shows_the_staged_rules(rig: Rig) -> None:
    await setup(rig, *STAGED)
    nid = await send(rig, "staged-6")
    async with httpx.AsyncClient(base_url=rig.base_url) as http:
        signed_in = await http.post("/console/sign-in", data={"api_key": KEYS["oscar"]})
        assert signed_in.status_code == 303
        page = (await http.get(f"/console/notifications/{nid}")).text
    row = page.split('id="person-alice"')[1].split("</tr>")[0]
    assert "hook after 2m: pending" in row


async def test_an_escalation_step_that_first_asks_someone_starts_their_later_rules(
    rig: Rig,
) -> None:
    """Bob is first asked by the escalation step at 10 minutes: his later rule (the
    pager after 2 minutes) runs from that moment, started in the step's commit."""
    alice = rpb.Recipient(
        recipient_id="alice",
        display_name="Alice Martin",
        time_zone="UTC",
        contacts=[rpb.Contact(channel="mail", address="alice@example.com")],
    )
    bob = rpb.Recipient(
        recipient_id="bob",
        display_name="Bob Okafor",
        time_zone="UTC",
        contacts=[
            rpb.Contact(channel="mail", address="bob@example.com"),
            rpb.Contact(channel="hook", address="bob-pager"),
        ],
        notification_rules=[rule("mail", HIGH), rule("hook", HIGH, minutes=2)],
    )
    await put_recipients(rig.server, [alice, bob])
    step = t.EscalationStep(after=after(minutes=10), targets=[t.Target(recipient_id="bob")])
    spec = acked_spec(
        targets=[t.Target(recipient_id="alice")], ack_timeout_minutes=60, escalation=[step]
    )
    await put_policy(rig.server, TYPE, spec)
    nid = await send(rig, "staged-escalated")
    assert [m["To"] for m in rig.smtp.messages] == ["alice@example.com"]
    [asked] = (await rig.get(nid)).recipients
    assert asked.recipient_id == "alice" and not asked.staged_rules

    rig.clock.advance(minutes=10, seconds=1)
    stepped = rig.clock()
    assert (await rig.server.app.followups.run_once()).fired == 1
    assert [m["To"] for m in rig.smtp.messages][-1] == "bob@example.com"  # his first rule
    assert pages(rig) == []
    n = await rig.get(nid)
    [staged] = next(p for p in n.recipients if p.recipient_id == "bob").staged_rules
    assert (staged.channel, staged.after.seconds) == ("hook", 120)
    assert staged.state == t.STAGED_RULE_STATE_PENDING
    due = staged.due_time.ToDatetime(tzinfo=UTC)  # 2 minutes from the step, not delivery
    assert stepped + timedelta(minutes=2) <= due <= rig.clock() + timedelta(minutes=2)

    assert await fire(rig, seconds=60) == (0, 0)  # his 2 minutes run from the step
    assert await fire(rig, seconds=61) == (1, 0)
    assert pages(rig) == ["bob"]
    assert await fire(rig, minutes=5) == (0, 0)
    rig.clock.advance(minutes=10)  # no further step asks anyone, nothing more starts
    assert (await rig.server.app.followups.run_once()).fired == 0
    assert await fire(rig, minutes=1) == (0, 0)
    [staged] = next(
        p for p in (await rig.get(nid)).recipients if p.recipient_id == "bob"
    ).staged_rules
    assert staged.state == t.STAGED_RULE_STATE_SENT
