"""People's contacts are personal data, and a type can name who may send it (issue 42),
through gRPC and JSON over HTTP, on SQLite.

- A producer or responder reads people's ids, names and time zones and who is on call;
  contacts and quiet hours only with the operator role.
- A policy's ``allowed_principals`` refuses every other principal with
  PERMISSION_DENIED / TYPE_NOT_ALLOWED, in SendNotification, in each item of
  BatchSendNotifications and in Simulate alike; an empty list lets anyone send.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest

from tests.support.grpc_errors import rich_error, rich_status
from tests.support.people import (
    minutes,
    put_policy,
    put_recipients,
    put_rotation,
    stub_as,
)
from tests.support.server import KEYS, RunningServer, send_request, start_server
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import policy_service_pb2 as ppb
from uns.v1 import recipient_service_pb2 as rpb
from uns.v1 import recipient_service_pb2_grpc as rpb_grpc
from uns.v1 import types_pb2 as t

CHANNELS = """
mail:
  type: email
  host: 127.0.0.1
  port: 2525
  from: UNS <uns@example.com>
  to: [oncall@example.com]
"""


@pytest.fixture
async def server(db_url: str, tmp_path: Path) -> AsyncIterator[RunningServer]:
    channels = tmp_path / "channels.yaml"
    channels.write_text(CHANNELS)
    running = await start_server(
        db_url,
        tmp_path,
        channels_file=str(channels),
        dispatch_enabled=False,
        http_listen="127.0.0.1:0",
    )
    try:
        yield running
    finally:
        await running.stop()


async def _http(server: RunningServer, path: str, body: dict[str, Any], who: str) -> Any:
    async with (
        aiohttp.ClientSession(f"http://127.0.0.1:{server.app.http_port}") as session,
        session.post(
            path,
            json=body,
            headers={"Authorization": f"Bearer {KEYS[who]}"},
        ) as response,
    ):
        assert response.status == 200, await response.text()
        return await response.json()


async def test_only_an_operator_reads_contacts_and_quiet_hours(server: RunningServer) -> None:
    await put_recipients(
        server,
        [
            rpb.Recipient(
                recipient_id="dave",
                display_name="Dave Null",
                time_zone="Europe/Paris",
                contacts=[rpb.Contact(channel="mail", address="dave@example.com")],
                quiet_hours=t.QuietHours(time_zone="Europe/Paris", start="22:00", end="07:00"),
            )
        ],
    )
    await put_rotation(
        server, "ops", ["dave"], start=datetime(2026, 1, 1, tzinfo=UTC), shift=minutes(60)
    )
    for who in ("alice", "rita", "oscar"):
        people = stub_as(server, rpb_grpc.RecipientServiceStub, who)
        got = (await people.GetRecipient(rpb.GetRecipientRequest(recipient_id="dave"))).recipient
        [listed] = (await people.ListRecipients(rpb.ListRecipientsRequest())).recipients
        on_call = await people.GetOnCall(rpb.GetOnCallRequest(rotation_id="ops"))
        over_http = await _http(
            server, "/uns.v1.RecipientService/GetRecipient", {"recipientId": "dave"}, who
        )
        listed_http = await _http(server, "/uns.v1.RecipientService/ListRecipients", {}, who)
        for person in (got, listed):
            assert (person.recipient_id, person.display_name, person.time_zone) == (
                "dave",
                "Dave Null",
                "Europe/Paris",
            )
        assert on_call.recipient_id == "dave"
        if who == "oscar":
            for person in (got, listed):
                assert [c.address for c in person.contacts] == ["dave@example.com"]
                assert person.quiet_hours.start == "22:00"
            assert over_http["recipient"]["contacts"][0]["address"] == "dave@example.com"
            assert listed_http["recipients"][0]["quietHours"]["end"] == "07:00"
        else:
            for person in (got, listed):
                assert list(person.contacts) == [] and not person.HasField("quiet_hours"), who
            for document in (over_http["recipient"], listed_http["recipients"][0]):
                assert document["displayName"] == "Dave Null"
                assert "contacts" not in document and "quietHours" not in document, who
                assert "dave@example.com" not in str(document)


async def test_a_policy_names_the_principals_allowed_to_send_its_type(
    server: RunningServer,
) -> None:
    spec = ppb.PolicySpec(
        channels=["mail"], delivery_mode=t.DELIVERY_MODE_BEST_EFFORT, allowed_principals=["bob"]
    )
    revision = await put_policy(server, "bob.page", spec)
    assert list(revision.spec.allowed_principals) == ["bob"]
    await put_policy(
        server,
        "anyone.page",
        ppb.PolicySpec(channels=["mail"], delivery_mode=t.DELIVERY_MODE_BEST_EFFORT),
    )
    alice, bob = server.stub("alice"), server.stub("bob")
    refusals = []
    for call in (
        alice.SendNotification(send_request(notification_type="bob.page")),
        alice.Simulate(pb.SimulateRequest(request=send_request(notification_type="bob.page"))),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call
        refusals.append(rich_error(caught.value))
    batch = await alice.BatchSendNotifications(
        pb.BatchSendNotificationsRequest(
            requests=[
                send_request(notification_type="anyone.page", idempotency_key="a"),
                send_request(notification_type="bob.page", idempotency_key="b"),
            ]
        )
    )
    first, second = batch.results
    assert first.WhichOneof("result") == "response"
    refusals.append(rich_status(second.error))
    for error in refusals:
        assert (error.code, error.reason) == (grpc.StatusCode.PERMISSION_DENIED, "TYPE_NOT_ALLOWED")
        assert error.metadata == {"principal": "alice", "notification_type": "bob.page"}
        assert "bob'" not in error.message  # never who else may send it
    # Over HTTP, the same refusal.
    async with (
        aiohttp.ClientSession(f"http://127.0.0.1:{server.app.http_port}") as session,
        session.post(
            "/uns.v1.NotificationService/SendNotification",
            json={
                "notificationType": "bob.page",
                "intent": "NOTIFICATION_INTENT_WARNING",
                "title": "t",
                "message": "m",
                "source": "curl",
            },
            headers={"Authorization": f"Bearer {KEYS['alice']}"},
        ) as response,
    ):
        assert response.status == 403
        [info] = [d for d in (await response.json())["details"] if d["type"].endswith("ErrorInfo")]
        assert info["debug"]["reason"] == "TYPE_NOT_ALLOWED"
    # The named principal sends; anyone sends a type whose list is empty.
    assert (await bob.SendNotification(send_request(notification_type="bob.page"))).notification_id
    simulated = await bob.Simulate(
        pb.SimulateRequest(request=send_request(notification_type="bob.page"))
    )
    assert list(simulated.resolved_channels) == ["mail"]
    assert (
        await alice.SendNotification(send_request(notification_type="anyone.page"))
    ).notification_id
    # A send already accepted before the type was closed to its sender still replays.
    await put_policy(
        server,
        "anyone.page",
        ppb.PolicySpec(
            channels=["mail"], delivery_mode=t.DELIVERY_MODE_BEST_EFFORT, allowed_principals=["bob"]
        ),
    )
    replay = await alice.BatchSendNotifications(
        pb.BatchSendNotificationsRequest(
            requests=[send_request(notification_type="anyone.page", idempotency_key="a")]
        )
    )
    assert replay.results[0].response.idempotent_replay


async def test_allowed_principals_are_validated(server: RunningServer) -> None:
    for principals, field in (
        (["ok", ""], "spec.allowed_principals[1]"),
        (["x" * 256], "spec.allowed_principals[0]"),
        ([f"p{i}" for i in range(101)], "spec.allowed_principals"),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await put_policy(
                server,
                "bad.page",
                ppb.PolicySpec(
                    channels=["mail"],
                    delivery_mode=t.DELIVERY_MODE_BEST_EFFORT,
                    allowed_principals=principals,
                ),
            )
        error = rich_error(caught.value)
        assert error.reason == "INVALID_REQUEST" and field in error.violations, error
