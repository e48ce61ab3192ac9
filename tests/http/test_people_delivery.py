"""One message per person (SPEC §6, issue 31 items 4, 5 and 8) through a real server
with its HTTP surface, on SQLite: each targeted person gets their own
message on each of their contacts (an email to their address, a Slack direct message
to their user id), with links signed for them; answering settles as
``recipient:<id>`` with ``recipient_id`` on the event and the audit record; a person
with no usable contact is recorded; a person still owed an answer cannot be deleted."""

from __future__ import annotations

import json

import grpc
import httpx
import pytest

from tests.http.conftest import PAGERDUTY_WEBHOOK_SECRET, Rig
from tests.http.helpers import click, email_links
from tests.http.test_provider_callbacks import (
    PAGERDUTY_PATH,
    SLACK_PATH,
    pagerduty_body,
    slack_button,
    slack_headers,
)
from tests.http.test_provider_callbacks import slack_request as _slack_request
from tests.support.grpc_errors import rich_error
from tests.support.people import acked_spec, operator_stub, put_people, put_policy
from tests.support.server import KEYS
from tests.support.watching import events_until, has_kind
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import recipient_service_pb2 as rpb
from uns.v1 import recipient_service_pb2_grpc as rpb_grpc
from uns.v1 import types_pb2 as t
from uns_server.domain.signatures import pagerduty_signature

TYPE = "ops.people"


async def setup_people(rig: Rig) -> None:
    people = {
        "alice": [("mail", "alice@example.com"), ("alerts-slack", "U0ALICE")],
        "bob": [("mail", "bob@example.com")],
        "carol": [],  # nobody can reach carol
    }
    await put_people(rig.server, people)
    targets = [t.Target(recipient_id=r) for r in people]
    spec = acked_spec(channels=["hook"], targets=targets, ack_timeout_minutes=30)
    await put_policy(rig.server, TYPE, spec)


async def test_each_person_gets_their_own_messages_and_answers_as_themselves(rig: Rig) -> None:
    await setup_people(rig)
    nid = await rig.send("people-1", notification_type=TYPE)
    assert await rig.deliver() == 1

    # The shared channel gets its one message; each person one per usable contact.
    assert len(rig.fakes.calls("/hook")) == 1
    mails = {m["To"]: m for m in rig.smtp.messages}
    assert set(mails) == {"alice@example.com", "bob@example.com"}
    [dm] = rig.fakes.slack("chat.postMessage")
    assert dm["channel"] == "U0ALICE"

    n = await rig.get(nid)
    assert n.state == t.NOTIFICATION_STATE_DELIVERED
    assert n.ack_state == t.ACK_STATE_PENDING
    people = {r.recipient_id: r for r in n.recipients}
    assert set(people) == {"alice", "bob", "carol"}
    assert sorted(people["alice"].channels_accepted) == ["alerts-slack", "mail"]
    assert {r.channel for r in people["alice"].provider_references} == {"alerts-slack", "mail"}
    assert {r.recipient for r in people["alice"].provider_references} == {
        "email:alice@example.com",
        "slack:U0ALICE",
    }
    assert list(people["bob"].channels_accepted) == ["mail"]
    assert people["carol"].unreachable_reason == "no contact on a channel this server has"
    assert not people["carol"].provider_references
    # Contacts are personal data (issue 42): the producer that sent it reads whom each
    # message was for, not the person's addresses.
    mine = (
        await rig.server.stub("alice").GetNotification(
            pb.GetNotificationRequest(notification_id=nid)
        )
    ).notification
    for ref in [
        *mine.provider_references,
        *(r for p in mine.recipients for r in p.provider_references),
    ]:
        assert ref.recipient_id == "" or ref.recipient == f"recipient:{ref.recipient_id}", ref
    assert "alice@example.com" not in str(mine) and "U0ALICE" not in str(mine)

    # Bob answers through his own link: settled as recipient:bob.
    async with httpx.AsyncClient() as http:
        answered = await click(http, email_links(mails["bob@example.com"])["Acknowledge"], "ack")
    assert answered.status_code == 303, answered.text
    n = await rig.get(nid)
    assert (n.ack_state, n.ack_actor) == (t.ACK_STATE_ACKED, "recipient:bob")
    [record] = await rig.ack_records(nid)
    assert (record.acked_by, record.recipient_id, record.via) == ("recipient:bob", "bob", "link")

    events = await events_until(
        rig.server.stub("oscar"),
        pb.WatchEventsRequest(replay_history=True, notification_ids=[nid]),
        has_kind(nid, t.EVENT_KIND_ACKED),
    )
    [acked] = [e for e in events if e.kind == t.EVENT_KIND_ACKED]
    assert acked.payload["recipient_id"] == "bob"
    results = [e for e in events if e.kind == t.EVENT_KIND_CHANNEL_ATTEMPT_RESULT]
    assert sorted(
        (e.payload["channel"], e.payload["recipient_id"])
        for e in results
        if "recipient_id" in e.payload
    ) == [
        ("alerts-slack", "alice"),
        ("mail", "alice"),
        ("mail", "bob"),
    ]
    # The console's notification page lists the people and who answered.
    async with httpx.AsyncClient(base_url=rig.base_url) as http:
        signed_in = await http.post("/console/sign-in", data={"api_key": KEYS["oscar"]})
        assert signed_in.status_code == 303
        page = (await http.get(f"/console/notifications/{nid}")).text
    assert 'id="people"' in page
    rows = {
        rid: page.split(f'id="person-{rid}"')[1].split("</tr>")[0]
        for rid in ("alice", "bob", "carol")
    }
    assert "mail, alerts-slack" in rows["alice"] and "acknowledged at" not in rows["alice"]
    assert "acknowledged at" in rows["bob"]
    assert "Bob" in rows["bob"] and 'title="recipient:bob"' in rows["bob"]  # by name
    assert "not reached: no contact on a channel this server has" in rows["carol"]
    [result] = [e for e in events if e.kind == t.EVENT_KIND_DELIVERY_RESULT]
    assert [dict(u) for u in result.payload["outcome"]["recipients_unreachable"]] == [
        {"recipient_id": "carol", "reason": "no contact on a channel this server has"}
    ]


@pytest.mark.parametrize(
    ("user", "actor"), [("U0ALICE", "recipient:alice"), ("U0EVE", "slack:U0EVE")]
)
async def test_a_slack_direct_message_answered_by_that_person(
    rig: Rig, user: str, actor: str
) -> None:
    """The button of alice's direct message settles as alice when her Slack user
    presses it; anyone else (a forwarded message) answers as their Slack user."""
    await setup_people(rig)
    nid = await rig.send("people-slack", notification_type=TYPE)
    await rig.deliver()
    body = _slack_request("uns_ack", slack_button(rig, "uns_ack"), user)
    async with httpx.AsyncClient(base_url=rig.base_url) as http:
        answer = await http.post(SLACK_PATH, content=body, headers=slack_headers(body))
    assert answer.status_code == 200, answer.text
    n = await rig.get(nid)
    assert (n.ack_state, n.ack_actor) == (t.ACK_STATE_ACKED, actor)
    [record] = await rig.ack_records(nid)
    assert (
        record.recipient_id == actor.removeprefix("recipient:")
        if actor.startswith("recipient:")
        else record.recipient_id == ""
    )


@pytest.mark.parametrize(
    ("agent", "actor"), [("PDAVE01", "recipient:dave"), ("PEVE002", "pagerduty:PEVE002")]
)
async def test_a_pagerduty_incident_acknowledged_by_the_person_it_paged(
    rig: Rig, agent: str, actor: str
) -> None:
    """The incident opened for dave's own PagerDuty contact settles as dave when his
    PagerDuty user acknowledges it; anyone else on the service answers as themselves."""
    await put_people(rig.server, {"dave": [("pager", "PDAVE01")]})
    spec = acked_spec(targets=[t.Target(recipient_id="dave")], ack_timeout_minutes=30)
    await put_policy(rig.server, "ops.paged", spec)
    nid = await rig.send("people-paged", notification_type="ops.paged")
    await rig.deliver()
    [trigger] = rig.fakes.pagerduty_events()
    envelope = json.loads(pagerduty_body(trigger["dedup_key"]))
    envelope["event"]["agent"]["id"] = agent
    body = json.dumps(envelope).encode()
    signature = pagerduty_signature(PAGERDUTY_WEBHOOK_SECRET, body)
    async with httpx.AsyncClient(base_url=rig.base_url) as http:
        answer = await http.post(
            PAGERDUTY_PATH, content=body, headers={"X-PagerDuty-Signature": signature}
        )
    assert answer.json() == {"outcome": "settled"}, answer.text
    n = await rig.get(nid)
    assert (n.ack_state, n.ack_actor) == (t.ACK_STATE_ACKED, actor)
    [record] = await rig.ack_records(nid)
    assert record.recipient_id == ("dave" if actor == "recipient:dave" else "")


async def test_a_person_still_owed_an_answer_cannot_be_deleted(rig: Rig) -> None:
    await setup_people(rig)
    people = operator_stub(rig.server, rpb_grpc.RecipientServiceStub)
    nid = await rig.send("people-owed", notification_type=TYPE)
    await rig.deliver()
    # The policy names alice, and the notification waits for an answer.
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await people.DeleteRecipient(rpb.DeleteRecipientRequest(recipient_id="alice"))
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    rich = rich_error(refused.value)
    assert rich.reason == "RECIPIENT_IN_USE"
    assert rich.metadata["notifications"] == nid

    await rig.server.stub("oscar").Acknowledge(pb.AcknowledgeRequest(notification_id=nid))
    # Settled, but the ACTIVE policy still names alice... the obligation no longer does.
    await people.DeleteRecipient(rpb.DeleteRecipientRequest(recipient_id="alice"))
