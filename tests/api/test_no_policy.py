"""A notification type without an ACTIVE policy, on a server without default channels
(issue 42: a misspelled type was reported DELIVERED to the log channel).

SendNotification, Simulate and each item of BatchSendNotifications are refused with
FAILED_PRECONDITION / NO_POLICY naming the type, over gRPC and JSON over HTTP (412),
and nothing is written; the same type with a policy, or on a server whose
``default_channels`` name a channel, is accepted.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import grpc
import pytest

from tests.http.test_json_over_http import error_info
from tests.support.grpc_errors import rich_error, rich_status
from tests.support.policies import activate_policy
from tests.support.server import KEYS, RunningServer, send_request, start_server
from uns.v1 import notification_service_pb2 as pb
from uns_server.app import App
from uns_server.domain.enums import DeliveryMode
from uns_server.settings import Settings, SettingsError

MISSPELLED = "dmeo.alert"


@pytest.fixture
async def strict(db_url: str, tmp_path: Path) -> AsyncIterator[RunningServer]:
    """A server as configured without scripts/serve: no default channels."""
    running = await start_server(
        db_url, tmp_path, default_channels="", http_listen="127.0.0.1:0", dispatch_enabled=False
    )
    try:
        yield running
    finally:
        await running.stop()


def assert_no_policy(code: grpc.StatusCode, reason: str, metadata: dict[str, str]) -> None:
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert reason == "NO_POLICY"
    assert metadata == {"notification_type": MISSPELLED}


async def test_send_and_simulate_of_a_type_without_policy_are_refused(
    strict: RunningServer,
) -> None:
    alice = strict.stub("alice")
    with pytest.raises(grpc.aio.AioRpcError) as sent:
        await alice.SendNotification(send_request(notification_type=MISSPELLED))
    refused = rich_error(sent.value)
    assert_no_policy(refused.code, refused.reason, refused.metadata)
    assert f"'{MISSPELLED}' has no ACTIVE policy" in refused.message
    with pytest.raises(grpc.aio.AioRpcError) as simulated:
        await alice.Simulate(pb.SimulateRequest(request=send_request(notification_type=MISSPELLED)))
    refused = rich_error(simulated.value)
    assert_no_policy(refused.code, refused.reason, refused.metadata)
    listed = await strict.stub("oscar").ListNotifications(pb.ListNotificationsRequest())
    assert list(listed.notifications) == []  # nothing was written


async def test_a_batch_refuses_only_its_items_without_policy(
    strict: RunningServer, db_url: str
) -> None:
    await activate_policy(
        db_url,
        "demo.alert",
        channels=["log"],
        delivery_mode=DeliveryMode.GUARANTEED,
        require_ack=False,
    )
    reply = await strict.stub("alice").BatchSendNotifications(
        pb.BatchSendNotificationsRequest(
            requests=[
                send_request(idempotency_key="a"),
                send_request(notification_type=MISSPELLED, idempotency_key="b"),
                send_request(idempotency_key="c"),
            ]
        )
    )
    first, second, third = reply.results
    assert first.WhichOneof("result") == third.WhichOneof("result") == "response"
    assert first.response.resolved_channels == ["log"]
    refused = rich_status(second.error)
    assert_no_policy(refused.code, refused.reason, refused.metadata)


async def test_json_over_http_answers_412_no_policy(strict: RunningServer) -> None:
    body = {
        "notificationType": MISSPELLED,
        "intent": "NOTIFICATION_INTENT_WARNING",
        "title": "Disk almost full",
        "message": "92% used on db-1",
        "source": "curl",
    }
    async with (
        aiohttp.ClientSession(f"http://127.0.0.1:{strict.app.http_port}") as http,
        http.post(
            "/uns.v1.NotificationService/SendNotification",
            data=json.dumps(body),
            headers={
                "Content-Type": "application/json",
                "Authorization": f"Bearer {KEYS['alice']}",
            },
        ) as response,
    ):
        assert response.status == 412
        answer = await response.json()
    assert answer["code"] == "failed_precondition"
    assert error_info(answer) == {
        "reason": "NO_POLICY",
        "domain": "uns.v1",
        "metadata": {"notification_type": MISSPELLED},
    }


async def test_default_channels_take_types_without_policy(db_url: str, tmp_path: Path) -> None:
    server = await start_server(db_url, tmp_path, default_channels="log", dispatch_enabled=False)
    try:
        sent = await server.stub("alice").SendNotification(
            send_request(notification_type=MISSPELLED)
        )
        assert list(sent.resolved_channels) == ["log"]
    finally:
        await server.stop()


async def test_default_channels_must_exist(tmp_path: Path) -> None:
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'uns.db'}", default_channels="log,slack"
    )
    with pytest.raises(SettingsError, match="default_channels names slack, which this server"):
        App(settings)
