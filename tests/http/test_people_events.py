"""People's contacts are personal data in WatchEvents too (issue 42): through a real
server on SQLite, the producer's streams (gRPC and Server-Sent Events,
live and catching up) of a delivery to people name each person's message
``recipient:<id>``, never their address; the operator's streams of the same events
carry the addresses, as before."""

from __future__ import annotations

import asyncio
import json

import aiohttp

from tests.http.conftest import Rig
from tests.http.test_people_delivery import TYPE, setup_people
from tests.support.server import KEYS
from tests.support.watching import WAIT_SECONDS, events_until, positioned
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t

WATCH = "/uns.v1.NotificationService/WatchEvents"
ADDRESSES = ("alice@example.com", "bob@example.com", "U0ALICE")
RESULT = t.EVENT_KIND_CHANNEL_ATTEMPT_RESULT
# The shared channel's message and one per person's contact: alice's mail and Slack, bob's mail.
RESULTS = 4


def _results(events: list[t.Event]) -> list[t.Event]:
    return [e for e in events if e.kind == RESULT]


def _references(events: list[t.Event]) -> dict[str, str]:
    """Each person's message (its route) -> the recipient its reference names."""
    out = {}
    for e in _results(events):
        payload = dict(e.payload)
        if "recipient_id" in payload:
            out[payload["route"]] = payload["provider_reference"]["recipient"]
    return out


async def _sse_events(response: aiohttp.ClientResponse, count: int) -> list[str]:
    """The data of the first ``count`` CHANNEL_ATTEMPT_RESULT events of a stream."""
    found: list[str] = []
    async with asyncio.timeout(WAIT_SECONDS):
        async for raw in response.content:
            line = raw.decode().rstrip("\n")
            if line.startswith("data: ") and "EVENT_KIND_CHANNEL_ATTEMPT_RESULT" in line:
                found.append(line.removeprefix("data: "))
                if len(found) == count:
                    return found
    return found


async def _first_heartbeat(response: aiohttp.ClientResponse) -> None:
    async with asyncio.timeout(WAIT_SECONDS):
        async for raw in response.content:
            if raw.decode().startswith("event: heartbeat"):
                return


async def test_only_the_operator_stream_carries_a_persons_address(rig: Rig) -> None:
    await setup_people(rig)
    nid = await rig.send("people-events", notification_type=TYPE)
    live = pb.WatchEventsRequest(notification_ids=[nid], kinds=[RESULT])
    producer = rig.server.stub("alice").WatchEvents(live, timeout=None)
    operator = rig.server.stub("oscar").WatchEvents(live, timeout=None)
    query = f"?notificationIds={nid}&kinds=EVENT_KIND_CHANNEL_ATTEMPT_RESULT"
    try:
        async with aiohttp.ClientSession(rig.base_url) as session:
            streams = [
                await session.get(
                    WATCH + query,
                    headers={"Accept": "text/event-stream", "Authorization": f"Bearer {KEYS[k]}"},
                )
                for k in ("alice", "oscar")
            ]
            for response in streams:
                assert response.status == 200
                await _first_heartbeat(response)
            await positioned(producer)
            await positioned(operator)
            assert await rig.deliver() == 1

            # Live, over Server-Sent Events: the same events, told apart by role.
            mine, theirs = [await _sse_events(r, RESULTS) for r in streams]
            for response in streams:
                response.close()
        assert len(mine) == len(theirs) == RESULTS
        assert not any(a in data for data in mine for a in ADDRESSES), mine
        assert '"recipient:alice"' in " ".join(mine) and '"recipient:bob"' in " ".join(mine)
        assert all(a in " ".join(theirs) for a in ADDRESSES), theirs
        assert [json.loads(d)["event"]["sequence"] for d in mine] == [
            json.loads(d)["event"]["sequence"] for d in theirs
        ]

        # Live, over gRPC: the producer reads whom each message was for.
        async def take(call: object) -> list[t.Event]:
            out: list[t.Event] = []
            async with asyncio.timeout(WAIT_SECONDS):
                async for response in call:  # type: ignore[attr-defined]
                    if response.HasField("event"):
                        out.append(response.event)
                        if len(out) == RESULTS:
                            return out
            return out

        seen_by_producer, seen_by_operator = await take(producer), await take(operator)
    finally:
        producer.cancel()
        operator.cancel()
    expected_people = {
        "mail@alice": "recipient:alice",
        "alerts-slack@alice": "recipient:alice",
        "mail@bob": "recipient:bob",
    }
    assert _references(seen_by_producer) == expected_people
    assert not any(a in str(seen_by_producer) for a in ADDRESSES)
    assert _references(seen_by_operator) == {
        "mail@alice": "email:alice@example.com",
        "alerts-slack@alice": "slack:U0ALICE",
        "mail@bob": "email:bob@example.com",
    }

    # Catching up from the table: the same rule.
    history = pb.WatchEventsRequest(notification_ids=[nid], replay_history=True)
    full = len(_results(seen_by_operator))
    again = await events_until(
        rig.server.stub("alice"), history, lambda seen: len(_results(seen)) == full
    )
    assert _references(again) == expected_people
    assert not any(a in str(again) for a in ADDRESSES)
    as_operator = await events_until(
        rig.server.stub("oscar"), history, lambda seen: len(_results(seen)) == full
    )
    assert _references(as_operator) == _references(seen_by_operator)


async def test_a_refused_address_quoted_by_the_mail_server_is_the_operators_alone(
    rig: Rig,
) -> None:
    """A mail server refusing a person's address quotes it (``550 <bob@...>``): in the
    attempt's error, the outcome's ``error_message`` of DELIVERY_RESULT and of the
    notification. The producer reads ``recipient:bob`` there; the operator the address."""
    await setup_people(rig)
    rig.smtp.handler.refused.add("bob@example.com")
    nid = await rig.send("people-refused", notification_type=TYPE)
    assert await rig.deliver() == 1
    history = pb.WatchEventsRequest(notification_ids=[nid], replay_history=True)

    def settled(seen: list[t.Event]) -> bool:
        return any(e.kind == t.EVENT_KIND_DELIVERY_RESULT for e in seen)

    mine = await events_until(rig.server.stub("alice"), history, settled)
    theirs = await events_until(rig.server.stub("oscar"), history, settled)
    assert "bob@example.com" in str(theirs)  # the operator's, as the server said it
    assert "bob@example.com" not in str(mine), mine
    [failed] = [e for e in _results(mine) if dict(e.payload).get("route") == "mail@bob"]
    assert failed.payload["success"] is False
    assert "<recipient:bob>: Recipient address rejected" in failed.payload["error"]
    [result] = [e for e in mine if e.kind == t.EVENT_KIND_DELIVERY_RESULT]
    assert "mail@bob: " in result.payload["outcome"]["error_message"]
    assert "<recipient:bob>" in result.payload["outcome"]["error_message"]

    get = pb.GetNotificationRequest(notification_id=nid)
    as_producer = (await rig.server.stub("alice").GetNotification(get)).notification
    as_operator = (await rig.server.stub("oscar").GetNotification(get)).notification
    assert "<bob@example.com>" in as_operator.outcome.error_message
    assert "bob@example.com" not in str(as_producer)
    assert "<recipient:bob>" in as_producer.outcome.error_message
