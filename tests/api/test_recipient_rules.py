"""``Recipient.notification_rules`` (SPEC §7 "Staged personal rules", issue 43 item 2)
through a real server on SQLite, the Python client and ``uns-admin``'s
people file: rules are stored and read back by the operator only (they name the
person's contacts), and each wrong rule is INVALID_REQUEST on its own field."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.api.test_recipients import CHANNELS
from tests.clients.helpers import config_for
from tests.support.grpc_errors import rich_error
from tests.support.people import minutes, stub_as
from tests.support.server import RunningServer, start_server
from uns.v1 import recipient_service_pb2 as pb
from uns.v1 import recipient_service_pb2_grpc as pb_grpc
from uns.v1 import types_pb2 as t
from uns_clients import AsyncClient, InvalidRequest
from uns_server.cli.people import recipient_from_document, recipient_to_json
from uns_server.domain.enums import Urgency
from uns_server.domain.errors import InvalidRequest as DomainInvalidRequest


@pytest.fixture
async def srv(db_url: str, tmp_path: Path) -> AsyncIterator[RunningServer]:
    channels = tmp_path / "channels.yaml"
    channels.write_text(CHANNELS)
    running = await start_server(
        db_url, tmp_path, channels_file=str(channels), dispatch_enabled=False
    )
    try:
        yield running
    finally:
        await running.stop()


def people(server: RunningServer, who: str = "oscar") -> Any:
    return stub_as(server, pb_grpc.RecipientServiceStub, who)


def rule(contact: str, after: float, urgency: int = t.URGENCY_HIGH) -> pb.NotificationRule:
    return pb.NotificationRule(contact=contact, after=minutes(after), urgency=urgency)


def person(*rules: pb.NotificationRule) -> pb.Recipient:
    return pb.Recipient(
        recipient_id="alice",
        display_name="Alice",
        time_zone="UTC",
        contacts=[
            pb.Contact(channel="chat", address="U024BE7LH"),
            pb.Contact(channel="mail", address="alice@example.com"),
        ],
        notification_rules=list(rules),
    )


async def test_rules_are_stored_and_read_by_the_operator_only(srv: RunningServer) -> None:
    rules = [rule("chat", 0), rule("mail", 2), rule("mail", 0, t.URGENCY_LOW)]
    put = await people(srv).PutRecipient(pb.PutRecipientRequest(recipient=person(*rules)))
    assert list(put.recipient.notification_rules) == rules
    got = await people(srv).GetRecipient(pb.GetRecipientRequest(recipient_id="alice"))
    assert list(got.recipient.notification_rules) == rules
    # Rules name the person's contacts: personal data, like the contacts.
    for who in ("rita", "alice"):
        other = await people(srv, who).GetRecipient(pb.GetRecipientRequest(recipient_id="alice"))
        assert not other.recipient.notification_rules and not other.recipient.contacts
    cleared = await people(srv).PutRecipient(pb.PutRecipientRequest(recipient=person()))
    assert not cleared.recipient.notification_rules


@pytest.mark.parametrize(
    ("bad", "field", "words"),
    [
        (rule("pager", 0), "recipient.notification_rules[1].contact", "one of the person's"),
        (rule("", 0), "recipient.notification_rules[1].contact", "is required"),
        (rule("mail", -1), "recipient.notification_rules[1].after", "from 0 to 24 hours"),
        (rule("mail", 60 * 25), "recipient.notification_rules[1].after", "from 0 to 24 hours"),
        (rule("mail", 0.01), "recipient.notification_rules[1].after", "whole seconds"),
        (rule("mail", 1, 0), "recipient.notification_rules[1].urgency", "URGENCY_HIGH"),
        (rule("chat", 0), "recipient.notification_rules[1]", "repeats an earlier rule"),
    ],
)
async def test_a_wrong_rule_is_refused_on_its_field(
    srv: RunningServer, bad: pb.NotificationRule, field: str, words: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await people(srv).PutRecipient(
            pb.PutRecipientRequest(recipient=person(rule("chat", 0), bad))
        )
    err = rich_error(info.value)
    assert (err.code, err.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_REQUEST")
    assert words in err.violations[field], err.violations
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await people(srv).GetRecipient(pb.GetRecipientRequest(recipient_id="alice"))
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND


async def test_the_client_puts_rules(srv: RunningServer) -> None:
    client = AsyncClient(config_for(srv.target, "oscar"))
    try:
        put = await client.people.put_recipient(
            "bob",
            display_name="Bob",
            time_zone="UTC",
            contacts=[("mail", "bob@example.com"), ("chat", "U0BOB1")],
            notification_rules=[
                ("chat", timedelta(0), "high"),
                ("mail", timedelta(minutes=2), "high"),
            ],
        )
        assert [(r.contact, r.after.seconds, r.urgency) for r in put.notification_rules] == [
            ("chat", 0, t.URGENCY_HIGH),
            ("mail", 120, t.URGENCY_HIGH),
        ]
        with pytest.raises(InvalidRequest):
            await client.people.put_recipient(
                "bob",
                display_name="Bob",
                time_zone="UTC",
                notification_rules=[("sms", timedelta(0), "low")],
            )
    finally:
        await client.close()


def test_the_people_file_reads_and_prints_rules() -> None:
    document = {
        "recipient_id": "alice",
        "display_name": "Alice",
        "time_zone": "UTC",
        "contacts": [{"channel": "push", "address": "alice"}, {"channel": "sms", "address": "1"}],
        "notification_rules": [
            {"contact": "push", "urgency": "high"},
            {"contact": "sms", "after": "2m", "urgency": "HIGH"},
            {"contact": "push", "after": 0, "urgency": "low"},
        ],
    }
    person = recipient_from_document(document)
    assert [(r.contact, r.after, r.urgency) for r in person.notification_rules] == [
        ("push", timedelta(0), Urgency.HIGH),
        ("sms", timedelta(minutes=2), Urgency.HIGH),
        ("push", timedelta(0), Urgency.LOW),
    ]
    printed = recipient_to_json(person)["notification_rules"]
    assert printed[1] == {"contact": "sms", "after": "2m", "urgency": "high"}
    reread = recipient_from_document({**document, "notification_rules": printed})
    assert reread.notification_rules == person.notification_rules
    wrong = [{"contact": "fax", "urgency": "urgent"}]
    with pytest.raises(DomainInvalidRequest) as info:
        recipient_from_document({**document, "notification_rules": wrong})
    assert {v.field for v in info.value.violations} == {
        "recipient.notification_rules[0].contact",
        "recipient.notification_rules[0].urgency",
    }
