"""Loopback fakes of provider APIs that record every call: Slack Web API, PagerDuty
Events API v2 (and any webhook receiver) on one ``HttpReceiver``, and an SMTP server.

Each fake answers what the provider documents for success, so adapters and the
message-update worker run their real code paths against a real socket.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from typing import Any

from aiosmtpd.controller import Controller

from tests.support.http_receiver import HttpReceiver, RecordedRequest, Reply, unused_tcp_port

SLACK_CHANNEL_ID = "C0UNSTEST"


class ProviderFakes:
    """Answers by path: ``/slack/api/<method>``, ``/pagerduty/v2/enqueue``, anything else 200."""

    def __init__(self, receiver: HttpReceiver) -> None:
        self.receiver = receiver
        self._ts = itertools.count(1)
        receiver.responder = self._answer

    @property
    def slack_base_url(self) -> str:
        return self.receiver.url("/slack/api")

    @property
    def pagerduty_base_url(self) -> str:
        return self.receiver.url("/pagerduty")

    def calls(self, path: str) -> list[RecordedRequest]:
        return [r for r in self.receiver.requests if r.path == path]

    def slack(self, method: str) -> list[dict[str, Any]]:
        return [r.json() for r in self.calls(f"/slack/api/{method}")]

    def pagerduty_events(self) -> list[dict[str, Any]]:
        return [r.json() for r in self.calls("/pagerduty/v2/enqueue")]

    def _answer(self, request: RecordedRequest) -> Reply:
        if request.path == "/slack/api/chat.postMessage":
            ts = f"1700000000.{next(self._ts):06d}"
            return Reply.json({"ok": True, "channel": SLACK_CHANNEL_ID, "ts": ts})
        if request.path == "/slack/api/chat.update":
            body = request.json()
            return Reply.json({"ok": True, "channel": body["channel"], "ts": body["ts"]})
        if request.path == "/pagerduty/v2/enqueue":
            key = request.json().get("dedup_key", "")
            return Reply.json(
                {"status": "success", "message": "Event processed", "dedup_key": key},
                status=202,
            )
        return Reply.text("ok")


@dataclass
class MailFake:
    """An aiosmtpd handler that keeps every accepted message; it refuses the addresses
    in ``refused`` as a mail server does an unknown mailbox (550, quoting it)."""

    messages: list[Message] = field(default_factory=list)
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)
    refused: set[str] = field(default_factory=set)

    async def handle_RCPT(
        self, server: Any, session: Any, envelope: Any, address: str, options: Any
    ) -> str:
        if address in self.refused:
            return f"550 5.1.1 <{address}>: Recipient address rejected: no such user"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append(message_from_bytes(envelope.original_content))
        return "250 2.0.0 accepted"


class SmtpFake:
    def __init__(self) -> None:
        self.handler = MailFake()
        self.port = unused_tcp_port()
        self._controller = Controller(self.handler, hostname="127.0.0.1", port=self.port)

    @property
    def messages(self) -> list[Message]:
        return self.handler.messages

    async def __aenter__(self) -> SmtpFake:
        await asyncio.to_thread(self._controller.start)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self._controller.stop)
