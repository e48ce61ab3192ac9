"""The console reads people as people (issue 42): through a real server with its HTTP
surface, on SQLite, with a movable clock. People appear by their
display names with their id kept beside (people asked, the answer, the timeline); a
reminder and an escalation step say whom they asked on which channel, and whom
their quiet hours held until when (in the zone of those quiet hours, UTC beside);
the on-call person inside their own quiet hours is marked held until then; a
notification owed an answer reads as waiting for one, then as answered."""

from __future__ import annotations

import asyncio
import html
import json
import re
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx

from tests.http.conftest import Rig
from tests.http.helpers import click, email_links
from tests.http.test_people_quiet_hours import ZONE, wall
from tests.support.people import acked_spec, minutes, put_policy, put_recipients, put_rotation
from tests.support.server import KEYS
from uns.v1 import recipient_service_pb2 as rpb
from uns.v1 import types_pb2 as t

TYPE = "ops.named"
NAMES = {"alice": "Alice Martin", "bob": "Bob Okafor"}
_TAG = re.compile(r"<[^>]+>")


def text_of(fragment: str) -> str:
    """What a reader sees of an HTML fragment: tags out, entities decoded, spaces one."""
    return " ".join(html.unescape(_TAG.sub(" ", fragment)).split())


def row(page: str, marker: str, end: str = "</tr>") -> str:
    return page.split(marker, 1)[1].split(end, 1)[0]


def in_tokyo(value: datetime) -> str:
    local = value.astimezone(ZoneInfo(ZONE))
    return f"{local:%Y-%m-%d %H:%M} {ZONE} ({value:%H:%M} UTC)"


async def setup(rig: Rig) -> datetime:
    """Alice (on call) falls asleep 5 minutes from now until 3 hours from now, in Tokyo;
    bob stays awake. The policy asks the rotation and bob, reminds once after 10
    minutes and escalates to bob after 20. When alice wakes up."""
    now = rig.clock().replace(second=0, microsecond=0)
    wakes = now + timedelta(hours=3)
    asleep = t.QuietHours(time_zone=ZONE, start=wall(now + timedelta(minutes=5)), end=wall(wakes))
    await put_recipients(
        rig.server,
        [
            rpb.Recipient(
                recipient_id=rid,
                display_name=name,
                time_zone=ZONE,
                contacts=[rpb.Contact(channel="mail", address=f"{rid}@example.com")],
                quiet_hours=asleep if rid == "alice" else None,
            )
            for rid, name in NAMES.items()
        ],
    )
    await put_rotation(
        rig.server,
        "primary",
        ["alice", "bob"],
        start=now - timedelta(minutes=10),
        shift=minutes(90),
    )
    await put_policy(
        rig.server,
        TYPE,
        acked_spec(
            channels=["hook"],
            targets=[t.Target(rotation_id="primary"), t.Target(recipient_id="bob")],
            ack_timeout_minutes=600,
            reminder=t.Reminder(first_after=minutes(10), multiplier=2, max_count=1),
            escalation=[
                t.EscalationStep(after=minutes(20), targets=[t.Target(recipient_id="bob")])
            ],
        ),
    )
    return wakes


async def next_event(stream: httpx.Response, kind: str) -> dict[str, Any]:
    """The next Server-Sent Event of ``kind`` on a console stream."""
    async for line in stream.aiter_lines():
        if line.startswith("data: "):
            event = json.loads(line[6:])
            if event["kind"] == kind:
                return dict(event)
    raise AssertionError("the stream ended")


async def console_pages(rig: Rig, *paths: str) -> list[str]:
    async with httpx.AsyncClient(base_url=rig.base_url) as http:
        signed_in = await http.post("/console/sign-in", data={"api_key": KEYS["oscar"]})
        assert signed_in.status_code == 303
        pages = [await http.get(p) for p in paths]
    assert all(p.status_code == 200 for p in pages)
    return [p.text for p in pages]


async def test_the_console_names_people_and_says_whom_each_step_asked(rig: Rig) -> None:
    wakes = await setup(rig)
    nid = await rig.send("named-1", notification_type=TYPE)
    assert await rig.deliver() == 1  # alice and bob are both awake: both mailed
    delivered = rig.clock()
    followups = rig.server.app.followups
    rig.clock.offset += timedelta(minutes=10, seconds=1)
    assert (await followups.run_once()).fired == 1  # the reminder: alice asleep now
    rig.clock.offset += timedelta(minutes=10)
    assert (await followups.run_once()).fired == 1  # the escalation step: bob

    detail, listing, people = await console_pages(
        rig,
        f"/console/notifications/{nid}",
        "/console/notifications?filter=ack_state%20%3D%20PENDING",
        "/console/people",
    )
    # Owed an answer: waiting for one, not a green DELIVERED.
    state = row(detail, 'id="state">', "</dd>")
    assert "Waiting for an answer" in state and "s-waiting" in state and "s-delivered" not in state
    listed = row(listing, f'href="/console/notifications/{nid}"')
    assert "Waiting for an answer" in listed and "s-delivered" not in listed

    # People asked: by name, the id beside and in the title.
    alice = row(detail, 'id="person-alice">')
    assert text_of(alice).startswith("Alice Martin alice mail")
    assert 'title="recipient:alice"' in alice

    # The on-call person asleep is marked held until she wakes, in her quiet hours' zone.
    on_call = row(people, 'id="rotation-primary">', "</td>\n<td>")
    assert "Alice Martin" in on_call and f"held until {in_tokyo(wakes)}" in text_of(on_call)

    # The follow-up rows say whom they asked, where, and whom they let sleep.
    timeline = {
        kind: text_of(what)
        for kind, what in re.findall(
            r'<span class="kind">(\w+)</span> <span class="what">(.*?)</span>', detail
        )
    }
    assert timeline["REMINDER_SENT"] == (
        "reminder 1, sent: on hook: sent; to Bob Okafor (bob) on mail: sent; "
        f"Alice Martin (alice) held by their quiet hours until {in_tokyo(wakes)}"
    )
    assert timeline["ESCALATED"] == "escalation step 1, sent: to Bob Okafor (bob) on mail: sent"
    # Each delivery attempt's message to a person names them, in the attempts too.
    assert "mail to Alice Martin (alice) delivered (attempt 1)" in text_of(detail)
    attempts = row(detail, 'id="attempts">', "</table>")
    assert "mail to Alice Martin alice" in text_of(attempts)

    # Bob answers from his escalation mail: the answer is his, by name, on the live
    # timeline too.
    async with httpx.AsyncClient(base_url=rig.base_url, timeout=30) as console:
        await console.post("/console/sign-in", data={"api_key": KEYS["oscar"]})
        live = f"/console/events?notification_id={nid}"
        async with console.stream("GET", live) as stream:
            async with httpx.AsyncClient() as http:
                bobs = [m for m in rig.smtp.messages if m["To"] == "bob@example.com"]
                answered = await click(http, email_links(bobs[-1])["Acknowledge"], "ack")
                assert answered.status_code == 303
            acked = await asyncio.wait_for(next_event(stream, "ACKED"), 30)
    assert acked["summary"] == "by Bob Okafor (bob) via link"
    [detail] = await console_pages(rig, f"/console/notifications/{nid}")
    assert "Acknowledged" in row(detail, 'id="state">', "</dd>")
    answered = row(detail, 'id="answered-by">', "</dd>")
    assert text_of(answered).startswith("Bob Okafor bob at") and "recipient:bob" in answered
    assert "by Bob Okafor (bob) via link" in text_of(row(detail, "ACKED</span>", "</li>"))
    assert "acknowledged at" in text_of(row(detail, 'id="person-bob">'))
    assert delivered < wakes
