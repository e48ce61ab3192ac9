"""A server with the HTTP surface on, every channel type pointed at loopback fakes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from tests.support.http_receiver import HttpReceiver
from tests.support.policies import activate_policy
from tests.support.providers import ProviderFakes, SmtpFake
from tests.support.server import KEYS, RunningServer, ShiftableClock, send_request, start_server
from uns.v1 import audit_service_pb2 as audit_pb
from uns.v1 import audit_service_pb2_grpc as audit_grpc
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t
from uns_server.domain.enums import DeliveryMode

LINK_KEY = "test-link-key-0123456789abcdef-0123456789"
SLACK_SIGNING_SECRET = "slack-signing-secret-for-tests"
PAGERDUTY_WEBHOOK_SECRET = "pagerduty-webhook-secret-for-tests"
ALL_CHANNELS = ["alerts-slack", "pager", "hook", "mail"]


@dataclass
class Rig:
    server: RunningServer
    fakes: ProviderFakes
    smtp: SmtpFake
    clock: ShiftableClock

    @property
    def base_url(self) -> str:
        return self.server.app.public_url

    async def send(self, key: str, notification_type: str = "ops.page", **fields: object) -> str:
        sent = await self.server.stub("alice").SendNotification(
            send_request(notification_type=notification_type, idempotency_key=key, **fields)
        )
        return str(sent.notification_id)

    async def deliver(self) -> int:
        return (await self.server.app.dispatcher.run_once()).claimed

    async def ack_records(self, notification_id: str) -> list[audit_pb.AckAuditRecord]:
        channel = grpc.aio.insecure_channel(self.server.target)
        try:
            reply = await audit_grpc.AuditServiceStub(channel).ListAckAuditRecords(
                audit_pb.ListAckAuditRecordsRequest(notification_id=notification_id),
                metadata=(("authorization", f"Bearer {KEYS['oscar']}"),),
            )
        finally:
            await channel.close()
        return list(reply.records)

    async def get(self, notification_id: str) -> t.Notification:
        reply = await self.server.stub("oscar").GetNotification(
            pb.GetNotificationRequest(notification_id=notification_id)
        )
        return reply.notification


def channels_yaml(fakes: ProviderFakes, smtp: SmtpFake) -> str:
    return f"""
alerts-slack:
  type: slack
  token: xoxb-test-token
  channel: "#alerts"
  base_url: {fakes.slack_base_url}
  signing_secret: {SLACK_SIGNING_SECRET}
pager:
  type: pagerduty
  routing_key: R0UTINGKEY
  base_url: {fakes.pagerduty_base_url}
  webhook_secret: {PAGERDUTY_WEBHOOK_SECRET}
hook:
  type: webhook
  url: {fakes.receiver.url("/hook")}
  secret: webhook-secret-for-tests
mail:
  type: email
  host: 127.0.0.1
  port: {smtp.port}
  from: UNS <uns@example.com>
  to: [oncall@example.com]
  local_hostname: uns.test
"""


@pytest.fixture
async def rig(db_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with HttpReceiver() as receiver, SmtpFake() as smtp:
        fakes = ProviderFakes(receiver)
        channels = tmp_path / "channels.yaml"
        channels.write_text(channels_yaml(fakes, smtp))
        for name, channels_, ack in (
            ("ops.page", ALL_CHANNELS, True),
            ("ops.mail", ["mail"], True),
            ("ops.info", ["mail"], False),
        ):
            await activate_policy(
                db_url,
                name,
                channels=channels_,
                delivery_mode=DeliveryMode.GUARANTEED,
                require_ack=ack,
                ack_timeout_minutes=30,
            )
        clock = ShiftableClock()
        server = await start_server(
            db_url,
            tmp_path,
            clock=clock,
            channels_file=str(channels),
            dispatch_enabled=False,
            http_listen="127.0.0.1:0",
            action_link_keys=LINK_KEY,
        )
        try:
            yield Rig(server, fakes, smtp, clock)
        finally:
            await server.stop()
