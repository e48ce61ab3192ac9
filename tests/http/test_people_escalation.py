"""Escalation to people (SPEC §6, issue 31 items 3 and 8) through a real server, on
SQLite, with a movable clock: a rotation is resolved when each message
is sent (a step that fires after a hand-off asks the new person), a step asks its own
targets, ``escalation_loops`` runs the steps again, and the person who was escalated
to answers as themselves."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx

from tests.http.conftest import Rig
from tests.http.helpers import click, email_links
from tests.support.people import acked_spec, minutes, put_people, put_policy, put_rotation
from tests.support.watching import events_until
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t

TYPE = "ops.escalate"


async def setup(rig: Rig, start: datetime) -> None:
    mail = {rid: [("mail", f"{rid}@example.com")] for rid in ("alice", "bob")}
    await put_people(rig.server, mail)
    # alice until start+30m, bob until start+60m, alice again.
    await put_rotation(rig.server, "primary", ["alice", "bob"], start=start, shift=minutes(30))
    await put_policy(
        rig.server,
        TYPE,
        acked_spec(
            targets=[t.Target(rotation_id="primary")],
            ack_timeout_minutes=60,
            escalation=[
                t.EscalationStep(after=minutes(10), targets=[t.Target(recipient_id="bob")]),
                t.EscalationStep(after=minutes(25), targets=[t.Target(rotation_id="primary")]),
            ],
            escalation_loops=1,
        ),
    )


def mailed(rig: Rig) -> list[tuple[str, str]]:
    return [(m["To"], m["Subject"]) for m in rig.smtp.messages]


async def test_escalation_resolves_the_rotation_when_each_step_fires_and_loops(
    rig: Rig,
) -> None:
    start = rig.clock() - timedelta(minutes=10)
    await setup(rig, start)
    nid = await rig.send("escalate-1", notification_type=TYPE)
    assert await rig.deliver() == 1
    n = await rig.get(nid)
    d = n.deliver_time.ToDatetime(tzinfo=UTC)
    assert mailed(rig) == [("alice@example.com", "[NORMAL] Disk almost full")]

    worker = rig.server.app.followups
    expected = [
        (10, "bob@example.com"),  # step 1: bob, by name
        (25, "bob@example.com"),  # step 2: the rotation after its hand-off at +20m: bob
        (35, "bob@example.com"),  # loop: step 1 again
        (50, "alice@example.com"),  # loop: step 2, the rotation back to alice at +50m
    ]
    for number, (offset, to) in enumerate(expected, start=1):
        rig.clock.offset += d + timedelta(minutes=offset) - rig.clock()
        assert (await worker.run_once()).fired == 1
        assert mailed(rig)[-1] == (to, f"[NORMAL] Escalation step {number}: Disk almost full")
    assert (await worker.run_once()).fired == 0
    n = await rig.get(nid)
    assert n.escalations_sent == 4
    people = {r.recipient_id: r for r in n.recipients}
    assert len(people["bob"].provider_references) == 3
    assert len(people["alice"].provider_references) == 2

    events = await events_until(
        rig.server.stub("oscar"),
        pb.WatchEventsRequest(replay_history=True, notification_ids=[nid]),
        lambda evs: sum(e.kind == t.EVENT_KIND_ESCALATED for e in evs) == 4,
    )
    steps = [e.payload for e in events if e.kind == t.EVENT_KIND_ESCALATED]
    assert [list(p["recipient_ids"]) for p in steps] == [["bob"], ["bob"], ["bob"], ["alice"]]
    assert [p["results"][0]["recipient_id"] for p in steps] == ["bob", "bob", "bob", "alice"]

    # Bob answers from the escalation that reached him: settled as recipient:bob.
    bobs = [m for m in rig.smtp.messages if m["To"] == "bob@example.com"]
    async with httpx.AsyncClient() as http:
        answered = await click(http, email_links(bobs[-1])["Acknowledge"], "ack")
    assert answered.status_code == 303
    n = await rig.get(nid)
    assert (n.ack_state, n.ack_actor) == (t.ACK_STATE_ACKED, "recipient:bob")
