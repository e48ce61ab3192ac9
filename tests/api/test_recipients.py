"""uns.v1.RecipientService through a real server, on SQLite: people and
rotations put, read, paged, validated and deleted; GetOnCall; roles; audit records."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from tests.support.grpc_errors import rich_error
from tests.support.people import minutes, put_people, stub_as, timestamp
from tests.support.server import RunningServer, start_server
from uns.v1 import recipient_service_pb2 as pb
from uns.v1 import recipient_service_pb2_grpc as pb_grpc
from uns.v1 import types_pb2 as t
from uns_server.store.tables import people_audit_records

CHANNELS = """
mail:
  type: email
  host: 127.0.0.1
  port: 2525
  from: UNS <uns@example.com>
  to: [oncall@example.com]
chat:
  type: slack
  token: xoxb-test-token
  channel: "#alerts"
chat-hook:
  type: slack
  webhook_url: https://hooks.slack.invalid/services/T/B/X
pager:
  type: pagerduty
  routing_key: R0UTINGKEY
"""


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


def people_stub(server: RunningServer, who: str) -> Any:
    return stub_as(server, pb_grpc.RecipientServiceStub, who)


def alice(**fields: Any) -> pb.Recipient:
    values: dict[str, Any] = {
        "recipient_id": "alice",
        "display_name": "Alice Martin",
        "time_zone": "Europe/Paris",
        "contacts": [
            pb.Contact(channel="mail", address="alice@example.com"),
            pb.Contact(channel="chat", address="U024BE7LH"),
        ],
        "quiet_hours": t.QuietHours(time_zone="Europe/Paris", start="22:00", end="07:00"),
    }
    values.update(fields)
    return pb.Recipient(**values)


START = datetime(2026, 3, 23, 9, 0, tzinfo=UTC)  # a Monday, 10:00 in Paris (CET)


def rotation(**fields: Any) -> pb.Rotation:
    values: dict[str, Any] = {
        "rotation_id": "primary",
        "members": ["alice", "bob"],
        "start_time": timestamp(START),
        "shift": minutes(7 * 24 * 60),
        "time_zone": "Europe/Paris",
    }
    values.update(fields)
    return pb.Rotation(**values)


async def refused(call: Any) -> Any:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    return rich_error(info.value)


async def audit_trail(conn: AsyncConnection, object_id: str) -> list[dict[str, Any]]:
    """The people audit records of one person or rotation, oldest first."""
    t = people_audit_records
    q = select(t).where(t.c.object_id == object_id).order_by(t.c.created_at, t.c.id)
    return [dict(r) for r in (await conn.execute(q)).mappings()]


async def test_put_get_list_delete_a_person(srv: RunningServer) -> None:
    oscar = people_stub(srv, "oscar")
    put = (await oscar.PutRecipient(pb.PutRecipientRequest(recipient=alice()))).recipient
    assert (put.recipient_id, put.updated_by) == ("alice", "oscar")
    assert [(c.channel, c.address) for c in put.contacts] == [
        ("mail", "alice@example.com"),
        ("chat", "U024BE7LH"),
    ]
    assert put.quiet_hours.start == "22:00"
    assert put.HasField("create_time") and put.HasField("update_time")
    # The person reads back as stored; producers and responders read them without
    # their contacts and quiet hours (personal data, issue 42).
    for who in ("oscar", "alice", "rita"):
        got = (
            await people_stub(srv, who).GetRecipient(pb.GetRecipientRequest(recipient_id="alice"))
        ).recipient
        if who == "oscar":
            assert got == put
        else:
            public = pb.Recipient()
            public.CopyFrom(put)
            public.ClearField("contacts")
            public.ClearField("quiet_hours")
            assert got == public
    # Replacing keeps create_time and drops what the new version leaves out.
    again = (
        await oscar.PutRecipient(
            pb.PutRecipientRequest(recipient=alice(contacts=[], display_name="Alice M."))
        )
    ).recipient
    assert (again.display_name, list(again.contacts)) == ("Alice M.", [])
    assert again.create_time == put.create_time
    # Paging by id.
    await put_people(srv, {rid: () for rid in ("bob", "carol", "dave")})
    seen: list[str] = []
    token = ""
    while True:
        page = await oscar.ListRecipients(pb.ListRecipientsRequest(page_size=3, page_token=token))
        seen += [r.recipient_id for r in page.recipients]
        token = page.next_page_token
        if not token:
            break
    assert seen == ["alice", "bob", "carol", "dave"]
    gone = (await oscar.DeleteRecipient(pb.DeleteRecipientRequest(recipient_id="dave"))).recipient
    assert gone.recipient_id == "dave"
    err = await refused(oscar.GetRecipient(pb.GetRecipientRequest(recipient_id="dave")))
    assert (err.code, err.reason) == (grpc.StatusCode.NOT_FOUND, "NOT_FOUND")
    # Every write left an audit record with its actor.
    async with srv.app.db.read() as conn:
        trail = await audit_trail(conn, "alice")
    assert [(r["action"], r["actor"]) for r in trail] == [("PUT", "oscar"), ("PUT", "oscar")]
    async with srv.app.db.read() as conn:
        trail = await audit_trail(conn, "dave")
    assert [r["action"] for r in trail] == ["PUT", "DELETE"]


async def test_only_operators_write(srv: RunningServer) -> None:
    for who in ("alice", "rita"):
        stub = people_stub(srv, who)
        for call in (
            stub.PutRecipient(pb.PutRecipientRequest(recipient=alice())),
            stub.DeleteRecipient(pb.DeleteRecipientRequest(recipient_id="alice")),
            stub.PutRotation(pb.PutRotationRequest(rotation=rotation())),
            stub.DeleteRotation(pb.DeleteRotationRequest(rotation_id="primary")),
        ):
            err = await refused(call)
            assert err.reason == "PERMISSION_DENIED"


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        ({"recipient_id": "Alice"}, "recipient.recipient_id", "INVALID_REQUEST"),
        ({"recipient_id": ""}, "recipient.recipient_id", "INVALID_REQUEST"),
        ({"display_name": " "}, "recipient.display_name", "INVALID_REQUEST"),
        ({"time_zone": "Mars/Olympus"}, "recipient.time_zone", "INVALID_REQUEST"),
        (
            {"quiet_hours": t.QuietHours(time_zone="UTC", start="25:00", end="07:00")},
            "recipient.quiet_hours.start",
            "INVALID_REQUEST",
        ),
        (
            {"contacts": [pb.Contact(channel="fax", address="+33 1")]},
            "recipient.contacts[0].channel",
            "UNKNOWN_CHANNEL",
        ),
        (
            {"contacts": [pb.Contact(channel="mail", address="U024BE7LH")]},
            "recipient.contacts[0].address",
            "INVALID_REQUEST",
        ),
        (
            {"contacts": [pb.Contact(channel="chat", address="alice@example.com")]},
            "recipient.contacts[0].address",
            "INVALID_REQUEST",
        ),
        (
            {"contacts": [pb.Contact(channel="chat-hook", address="U024BE7LH")]},
            "recipient.contacts[0].address",
            "INVALID_REQUEST",
        ),
        (
            {"contacts": [pb.Contact(channel="pager", address="nobody")]},
            "recipient.contacts[0].address",
            "INVALID_REQUEST",
        ),
    ],
)
async def test_invalid_people_are_refused_with_the_field(
    srv: RunningServer, change: dict[str, Any], field: str, reason: str
) -> None:
    err = await refused(
        people_stub(srv, "oscar").PutRecipient(pb.PutRecipientRequest(recipient=alice(**change)))
    )
    assert (err.code, err.reason) == (grpc.StatusCode.INVALID_ARGUMENT, reason)
    assert field in err.violations


async def test_rotations_name_existing_people_and_hold_them(srv: RunningServer) -> None:
    oscar = people_stub(srv, "oscar")
    err = await refused(oscar.PutRotation(pb.PutRotationRequest(rotation=rotation())))
    assert err.reason == "INVALID_REQUEST"
    assert set(err.violations) == {"rotation.members[0]", "rotation.members[1]"}
    await put_people(srv, {rid: () for rid in ("alice", "bob", "carol")})
    cover = pb.RotationOverride(
        recipient_id="carol",
        start_time=timestamp(START + timedelta(days=1)),
        end_time=timestamp(START + timedelta(days=2)),
    )
    put = (
        await oscar.PutRotation(pb.PutRotationRequest(rotation=rotation(overrides=[cover])))
    ).rotation
    assert (list(put.members), put.shift.seconds, put.updated_by) == (
        ["alice", "bob"],
        7 * 86400,
        "oscar",
    )
    got = (
        await people_stub(srv, "alice").GetRotation(pb.GetRotationRequest(rotation_id="primary"))
    ).rotation
    assert got == put
    # A member, or a person named only by an override, cannot be deleted.
    for rid in ("bob", "carol"):
        err = await refused(oscar.DeleteRecipient(pb.DeleteRecipientRequest(recipient_id=rid)))
        assert (err.code, err.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "RECIPIENT_IN_USE")
        assert err.metadata["rotations"] == "primary"
    page = await oscar.ListRotations(pb.ListRotationsRequest())
    assert [r.rotation_id for r in page.rotations] == ["primary"]
    await oscar.DeleteRotation(pb.DeleteRotationRequest(rotation_id="primary"))
    await oscar.DeleteRecipient(pb.DeleteRecipientRequest(recipient_id="carol"))
    err = await refused(oscar.GetRotation(pb.GetRotationRequest(rotation_id="primary")))
    assert err.reason == "NOT_FOUND"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"members": []}, "rotation.members"),
        ({"shift": None}, "rotation.shift"),
        ({"time_zone": "Nowhere"}, "rotation.time_zone"),
        ({"start_time": None}, "rotation.start_time"),
        ({"rotation_id": "has space"}, "rotation.rotation_id"),
        (
            {
                "overrides": [
                    pb.RotationOverride(
                        recipient_id="alice", start_time=timestamp(START), end_time=timestamp(START)
                    )
                ]
            },
            "rotation.overrides[0].end_time",
        ),
    ],
)
async def test_invalid_rotations_are_refused(
    srv: RunningServer, change: dict[str, Any], field: str
) -> None:
    oscar = people_stub(srv, "oscar")
    await put_people(srv, {rid: () for rid in ("alice", "bob")})
    msg = rotation(**{k: v for k, v in change.items() if v is not None})
    for k, v in change.items():
        if v is None:
            msg.ClearField(k)
    err = await refused(oscar.PutRotation(pb.PutRotationRequest(rotation=msg)))
    assert err.reason == "INVALID_REQUEST"
    assert field in err.violations


async def test_get_on_call_answers_who_and_until_when(srv: RunningServer) -> None:
    oscar = people_stub(srv, "oscar")
    await put_people(srv, {rid: () for rid in ("alice", "bob", "carol")})
    cover = pb.RotationOverride(
        recipient_id="carol",
        start_time=timestamp(START + timedelta(days=2)),
        end_time=timestamp(START + timedelta(days=3)),
    )
    await oscar.PutRotation(pb.PutRotationRequest(rotation=rotation(overrides=[cover])))
    producer = people_stub(srv, "alice")

    async def ask(at: datetime) -> pb.GetOnCallResponse:
        return await producer.GetOnCall(
            pb.GetOnCallRequest(rotation_id="primary", time=timestamp(at))
        )

    first = await ask(START + timedelta(hours=1))
    assert (first.recipient_id, first.override) == ("alice", False)
    assert first.next_recipient_id == "carol"
    assert first.shift_end_time.ToDatetime(tzinfo=UTC) == START + timedelta(days=2)
    covered = await ask(START + timedelta(days=2, hours=1))
    assert (covered.recipient_id, covered.override) == ("carol", True)
    # 2026-03-29 Paris springs forward: the weekly hand-off stays at 10:00 local,
    # which is 08:00 UTC from then on.
    second = await ask(START + timedelta(days=7))
    assert second.recipient_id == "bob"
    assert second.shift_end_time.ToDatetime(tzinfo=UTC) == datetime(2026, 4, 6, 8, 0, tzinfo=UTC)
    # Unset time: now, on the server's clock.
    now = await producer.GetOnCall(pb.GetOnCallRequest(rotation_id="primary"))
    assert now.HasField("time") and now.recipient_id in {"alice", "bob", "carol"}
    err = await refused(producer.GetOnCall(pb.GetOnCallRequest(rotation_id="nope")))
    assert err.reason == "NOT_FOUND"
