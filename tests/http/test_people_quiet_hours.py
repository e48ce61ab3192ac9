"""A person's own quiet hours (SPEC §6, issue 31 items 4 and 8) through a real server
with its HTTP surface, on SQLite, with a movable clock: a targeted
person's message is held while their quiet hours (in their zone) last, the shared
channel and the other people are not; the hold spends no attempt, is visible
(``outcome.held`` on DELIVERY_RESULT, ``next_attempt_time``) and the message goes out
when the hold ends. SAFETY is never held; an answer from a message already sent is
honoured during the hold, and then the held message is no longer sent."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx

from tests.http.conftest import Rig
from tests.http.helpers import click, email_links
from tests.support.people import acked_spec, put_policy, put_recipients
from tests.support.server import KEYS
from tests.support.watching import events_until, has_kind
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import recipient_service_pb2 as rpb
from uns.v1 import types_pb2 as t

TYPE = "ops.night"
ZONE = "Asia/Tokyo"  # alice's own zone, far from the server's UTC


def person(rid: str, quiet: t.QuietHours | None = None) -> rpb.Recipient:
    """``rid`` in Tokyo, mailed at ``rid@example.com``, quiet when ``quiet`` says."""
    return rpb.Recipient(
        recipient_id=rid,
        display_name=rid.title(),
        time_zone=ZONE,
        contacts=[rpb.Contact(channel="mail", address=f"{rid}@example.com")],
        quiet_hours=quiet,
    )


def wall(value: datetime) -> str:
    return value.astimezone(ZoneInfo(ZONE)).strftime("%H:%M")


async def setup(rig: Rig, *, max_attempts: int = 3) -> datetime:
    """Alice asleep (quiet from 2 hours ago to 2 hours from now, in Tokyo), bob awake;
    the policy asks both and posts to the shared webhook. When alice wakes up."""
    now = rig.clock().replace(second=0, microsecond=0)
    asleep = t.QuietHours(
        time_zone=ZONE, start=wall(now - timedelta(hours=2)), end=wall(now + timedelta(hours=2))
    )
    await put_recipients(rig.server, [person("alice", asleep), person("bob")])
    await put_policy(
        rig.server,
        TYPE,
        acked_spec(
            channels=["hook"],
            targets=[t.Target(recipient_id="alice"), t.Target(recipient_id="bob")],
            ack_timeout_minutes=600,
            max_attempts=max_attempts,
        ),
    )
    return now + timedelta(hours=2)


def mailed_to(rig: Rig) -> list[str]:
    return [m["To"] for m in rig.smtp.messages]


async def delivery_results(rig: Rig, nid: str, count: int) -> list[Any]:
    events = await events_until(
        rig.server.stub("oscar"),
        pb.WatchEventsRequest(replay_history=True, notification_ids=[nid]),
        lambda evs: sum(e.kind == t.EVENT_KIND_DELIVERY_RESULT for e in evs) >= count,
    )
    return [e.payload for e in events if e.kind == t.EVENT_KIND_DELIVERY_RESULT]


async def test_a_sleeping_persons_message_waits_for_their_morning(rig: Rig) -> None:
    # One attempt per cycle: the hold must not spend it, or alice's message is lost.
    wakes = await setup(rig, max_attempts=1)
    nid = await rig.send("night-1", notification_type=TYPE)
    assert await rig.deliver() == 1

    # The shared channel and bob are not held; alice is.
    assert len(rig.fakes.calls("/hook")) == 1
    assert mailed_to(rig) == ["bob@example.com"]
    n = await rig.get(nid)
    assert n.state == t.NOTIFICATION_STATE_PENDING
    assert n.cycle_attempts == 0  # the attempt was given back
    assert n.next_attempt_time.ToDatetime(tzinfo=UTC) == wakes
    [result] = await delivery_results(rig, nid, 1)
    [held] = result["outcome"]["held"]
    assert dict(held) == {
        "channel": "mail",
        "route": "mail@alice",
        "recipient_id": "alice",
        "held_until": wakes.isoformat(),
    }

    # The console's notification page says so.
    async with httpx.AsyncClient(base_url=rig.base_url) as http:
        signed_in = await http.post("/console/sign-in", data={"api_key": KEYS["oscar"]})
        assert signed_in.status_code == 303
        page = (await http.get(f"/console/notifications/{nid}")).text
    row = page.split('id="person-alice"')[1].split("</tr>")[0]
    # In the zone of her quiet hours, UTC beside.
    local = wakes.astimezone(ZoneInfo(ZONE))
    until = f"{local:%Y-%m-%d %H:%M} {ZONE} ({wakes:%H:%M} UTC)"
    assert f"held by their quiet hours until {until}" in row

    # Not before she wakes up.
    rig.clock.offset += wakes - timedelta(minutes=1) - rig.clock()
    assert await rig.deliver() == 0
    rig.clock.offset += wakes - rig.clock()
    assert await rig.deliver() == 1
    assert mailed_to(rig) == ["bob@example.com", "alice@example.com"]
    assert len(rig.fakes.calls("/hook")) == 1  # nothing sent twice
    n = await rig.get(nid)
    assert (n.state, n.ack_state) == (t.NOTIFICATION_STATE_DELIVERED, t.ACK_STATE_PENDING)
    assert n.deliver_time.ToDatetime(tzinfo=UTC) >= wakes
    people = {r.recipient_id: r for r in n.recipients}
    assert list(people["alice"].channels_accepted) == ["mail"]
    last = (await delivery_results(rig, nid, 2))[-1]
    assert "held" not in last["outcome"]
    # Each message's start is recorded before its provider call, a person's with them.
    events = await events_until(
        rig.server.stub("oscar"),
        pb.WatchEventsRequest(replay_history=True, notification_ids=[nid]),
        lambda evs: sum(e.kind == t.EVENT_KIND_DELIVERY_RESULT for e in evs) >= 2,
    )
    started = [
        (p["attempt"], p["channel"], p.get("route", ""), p.get("recipient_id", ""))
        for e in events
        if e.kind == t.EVENT_KIND_CHANNEL_ATTEMPT_STARTED
        for p in [dict(e.payload)]
    ]
    assert started == [
        (1, "hook", "", ""),
        (1, "mail", "mail@bob", "bob"),
        (2, "mail", "mail@alice", "alice"),
    ]


async def test_safety_is_never_held_by_a_persons_quiet_hours(rig: Rig) -> None:
    await setup(rig)
    nid = await rig.send("night-2", notification_type=TYPE, intent="NOTIFICATION_INTENT_SAFETY")
    assert await rig.deliver() == 1
    assert sorted(mailed_to(rig)) == ["alice@example.com", "bob@example.com"]
    assert (await rig.get(nid)).state == t.NOTIFICATION_STATE_DELIVERED


async def test_an_answer_during_the_hold_is_honoured_and_ends_the_asking(rig: Rig) -> None:
    wakes = await setup(rig)
    nid = await rig.send("night-3", notification_type=TYPE)
    assert await rig.deliver() == 1
    [bobs] = rig.smtp.messages
    async with httpx.AsyncClient() as http:
        answered = await click(http, email_links(bobs)["Acknowledge"], "ack")
    assert answered.status_code == 303, answered.text
    n = await rig.get(nid)
    assert (n.ack_state, n.ack_actor) == (t.ACK_STATE_ACKED, "recipient:bob")

    # Alice wakes up to nothing: the obligation was answered; the delivery completes.
    rig.clock.offset += wakes - rig.clock()
    assert await rig.deliver() == 1
    assert mailed_to(rig) == ["bob@example.com"]
    n = await rig.get(nid)
    assert (n.state, n.ack_state) == (t.NOTIFICATION_STATE_DELIVERED, t.ACK_STATE_ACKED)
    await events_until(
        rig.server.stub("oscar"),
        pb.WatchEventsRequest(replay_history=True, notification_ids=[nid]),
        has_kind(nid, t.EVENT_KIND_ACKED),
    )
