"""A server with the console on, a webhook channel at a loopback receiver that can be
told to refuse (to make dead letters), and helpers to drive the console over HTTP."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support.http_receiver import HttpReceiver, Reply
from tests.support.policies import activate_policy
from tests.support.server import KEYS, RunningServer, ShiftableClock, send_request, start_server
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t
from uns_server.domain.enums import DeliveryMode

_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@dataclass
class ConsoleRig:
    server: RunningServer
    receiver: HttpReceiver
    clock: ShiftableClock

    @property
    def base_url(self) -> str:
        return self.server.app.public_url

    def url(self, path: str) -> str:
        return self.base_url + path

    async def send(self, key: str, notification_type: str = "ops.hook", **fields: object) -> str:
        sent = await self.server.stub("alice").SendNotification(
            send_request(notification_type=notification_type, idempotency_key=key, **fields)
        )
        return str(sent.notification_id)

    async def deliver(self) -> int:
        return (await self.server.app.dispatcher.run_once()).claimed

    async def dead_letters(self, prefix: str, count: int, notification_type: str) -> list[str]:
        """``count`` notifications whose one allowed attempt the webhook refuses (400)."""
        self.receiver.script(*[Reply.text("bad request", status=400) for _ in range(count)])
        ids = [await self.send(f"{prefix}-{i}", notification_type) for i in range(count)]
        while await self.deliver():
            pass
        for nid in ids:
            assert (await self.get(nid)).state == t.NOTIFICATION_STATE_FAILED
        return ids

    async def get(self, notification_id: str) -> t.Notification:
        reply = await self.server.stub("oscar").GetNotification(
            pb.GetNotificationRequest(notification_id=notification_id)
        )
        return reply.notification

    async def sign_in(self, http: httpx.AsyncClient, who: str = "oscar") -> str:
        """Sign ``http`` in; the CSRF token of its session."""
        reply = await http.post(self.url("/console/sign-in"), data={"api_key": KEYS[who]})
        assert reply.status_code == 303, reply.text
        return csrf_of((await http.get(self.url("/console/keys"))).text)


def csrf_of(page: str) -> str:
    match = _CSRF.search(page)
    assert match, "the page has no form with a CSRF token"
    return match.group(1)


def channels_yaml(receiver: HttpReceiver) -> str:
    return f"""
hook:
  type: webhook
  url: {receiver.url("/hook")}
  secret: webhook-secret-for-tests
"""


@pytest.fixture
def http_request_timeout() -> float:
    """Generous, so a busy machine never turns a slow page into a 503; the test of
    event streams outliving it parametrizes a short one."""
    return 60.0


@pytest.fixture
async def console(
    db_url: str, tmp_path: Path, http_request_timeout: float
) -> AsyncIterator[ConsoleRig]:
    async with HttpReceiver() as receiver:
        channels = tmp_path / "channels.yaml"
        channels.write_text(channels_yaml(receiver))
        for name in ("ops.hook", "ops.batch"):
            await activate_policy(
                db_url,
                name,
                channels=["hook"],
                delivery_mode=DeliveryMode.GUARANTEED,
                require_ack=False,
                max_attempts=1,
            )
        await activate_policy(
            db_url,
            "ops.ack",
            channels=["hook"],
            delivery_mode=DeliveryMode.GUARANTEED,
            require_ack=True,
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
            watch_heartbeat_seconds=1.0,
            http_request_timeout_seconds=http_request_timeout,
        )
        try:
            yield ConsoleRig(server, receiver, clock)
        finally:
            await server.stop()
