"""Planted secrets never leave server configuration (SPEC §2 Channels, issue 8 item 3).

The server is configured with an API key, a webhook signing secret and header token, a
Slack bot token, a Slack incoming-webhook URL (its path is the credential), a PagerDuty
routing key and an SMTP password. Traffic then exercises every path that could echo
them: deliveries that succeed, providers that refuse *and echo the credential back* in
their error bodies (also straddling the error-excerpt cut), an SMTP server that is not
there, dead letters replayed and resolved by an operator, a request with a wrong key,
and refusals of every kind. Afterwards everything observable is searched: every event
(WatchEvents replay as operator), every notification and audit record, every error
message and ErrorInfo/BadRequest seen, every log record at DEBUG (message, extras,
exception text), every finished span, the Prometheus scrape, and every database row.
None may contain a secret, its URL-encoded or base64 forms, or a fragment of one.
"""

from __future__ import annotations

import base64
import json
import logging
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest
from google.protobuf import json_format
from google.protobuf.message import Message
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy import select

from tests.observability.helpers import scrape
from tests.security.rpcs import OK, Caller, Callers, Outcome
from tests.support.http_receiver import HttpReceiver, RecordedRequest, Reply, unused_tcp_port
from tests.support.policies import activate_policy
from tests.support.server import (
    KEYS,
    RunningServer,
    ShiftableClock,
    send_request,
    start_server,
    write_key_file,
)
from tests.support.tracing import span_capture
from uns.v1 import audit_service_pb2 as apb
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t
from uns_server.domain.enums import DeliveryMode
from uns_server.logs import JsonFormatter
from uns_server.services.auth import KEY_PREFIX, create_key, hash_key
from uns_server.store import tables

# Distinctive, and each long enough that any 12-character fragment is unambiguous.
API_KEY = "uns_k3yA_Q7xK2mV9pL4sN8dR3fT6"
WRONG_KEY = "uns_wr0ng_Z3vB8nM1qW5eR7tY2uI9"
SIGNING_RAW = "s1gn1ngK3y-H4jK8lP2oI6uY0tR"
WEBHOOK_SECRET = "whsec_" + base64.b64encode(SIGNING_RAW.encode()).decode()
HEADER_TOKEN = "h3ad3rT0k-A1sD5fG9hJ3kL7zX"
SLACK_TOKEN = "xoxb-5lackT0k-C2vB6nM0qW4eR8tY"
SLACK_HOOK_PATH = "/services/T0PLANTED/B0PLANTED/h00kPath-U5iO9pA3sD7fG1hJ"
PAGERDUTY_KEY = "R0ut1ngK3y-K4lZ8xC2vB6nM"
SMTP_PASSWORD = "smtpPa55w-E3rT7yU1iO5pA9sD"

SECRETS = {
    "api key": API_KEY,
    "wrong api key": WRONG_KEY,
    "webhook signing secret": WEBHOOK_SECRET,
    "webhook signing key": SIGNING_RAW,
    "webhook header token": HEADER_TOKEN,
    "slack token": SLACK_TOKEN,
    "slack webhook path": SLACK_HOOK_PATH.rsplit("/", 1)[1],
    "pagerduty routing key": PAGERDUTY_KEY,
    "smtp password": SMTP_PASSWORD,
}
FRAGMENT = 12  # characters of a secret that count as a leak

ALL_CHANNELS = ["hook", "slack-api", "slack-hook", "pager", "mail"]


def forms(secret: str) -> set[str]:
    """The secret as it could appear in text: raw, URL-encoded, base64."""
    return {
        secret,
        quote(secret, safe=""),
        quote_plus(secret),
        base64.b64encode(secret.encode()).decode().rstrip("="),
    }


def fragments(secret: str) -> Iterator[str]:
    for start in range(0, len(secret) - FRAGMENT + 1):
        yield secret[start : start + FRAGMENT]


def leaks(text: str) -> list[str]:
    found = []
    for name, secret in SECRETS.items():
        if any(form in text for form in forms(secret)):
            found.append(f"{name} (whole)")
        elif any(fragment in text for fragment in fragments(secret)):
            found.append(f"{name} (fragment)")
    return found


class Provider:
    """Every HTTP provider on one loopback receiver; ``failing`` makes them refuse, echoing
    what they received (headers, path, body) as careless providers do."""

    def __init__(self) -> None:
        self.failing = False

    def reply(self, request: RecordedRequest) -> Reply:
        path = request.path
        if not self.failing:
            if path == "/slack/chat.postMessage":
                return Reply.json({"ok": True, "ts": "1.2", "channel": "C1"})
            if path.startswith("/services/"):
                return Reply.text("ok")
            if path == "/pd/v2/enqueue":
                return Reply.json({"status": "success", "dedup_key": "d"}, status=202)
            return Reply(status=200)
        echo = f"{path} {dict(request.headers)} {request.body.decode(errors='replace')}"
        if path == "/slack/chat.postMessage":
            # A Slack-shaped refusal whose error code is the token itself.
            token = request.headers.get("authorization", "").removeprefix("Bearer ")
            return Reply.json({"ok": False, "error": token})
        if path.startswith("/services/"):
            return Reply.text(f"invalid_token {echo}", status=403)
        if path == "/pd/v2/enqueue":
            # A 2xx that is not PagerDuty's acceptance: its body becomes the error excerpt.
            return Reply.json({"status": "invalid", "echo": echo}, status=200)
        # The webhook: the header token straddles the 200-character error-excerpt cut.
        return Reply.text("x" * (200 - 16) + HEADER_TOKEN + " " + echo, status=400)


@dataclass
class Rig:
    server: RunningServer
    receiver: HttpReceiver
    provider: Provider
    clock: ShiftableClock
    exporter: InMemorySpanExporter
    callers: Callers
    seen: list[Outcome] = field(default_factory=list)

    def caller(self, who: str) -> Caller:
        if who == "carol":  # the principal of the planted key
            return self.callers.raw(f"Bearer {API_KEY}")
        return self.callers(who)

    async def call(self, who: str, rpc: str, request: Message) -> Outcome:
        outcome = await self.caller(who).call(rpc, request)
        self.seen.append(outcome)
        return outcome

    async def step(self) -> int:
        """Past any backoff, one dispatch batch."""
        self.clock.advance(hours=2)
        return (await self.server.app.dispatcher.run_once()).claimed


@pytest.fixture
async def rig(db_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    keys = write_key_file(tmp_path)
    entries = json.loads(keys.read_text())
    entries.append({"key": API_KEY, "principal": "carol", "roles": ["producer"]})
    keys.write_text(json.dumps(entries))
    provider = Provider()
    async with HttpReceiver() as receiver:
        receiver.responder = provider.reply
        channels = tmp_path / "channels.yaml"
        channels.write_text(
            json.dumps(
                {
                    "hook": {
                        "type": "webhook",
                        "url": receiver.url("/hook"),
                        "secret": WEBHOOK_SECRET,
                        "timeout_seconds": 2,
                        "headers": {"X-Api-Token": HEADER_TOKEN},
                    },
                    "slack-api": {
                        "type": "slack",
                        "token": SLACK_TOKEN,
                        "channel": "C1",
                        "base_url": receiver.url("/slack"),
                        "timeout_seconds": 2,
                    },
                    "slack-hook": {
                        "type": "slack",
                        "webhook_url": receiver.url(SLACK_HOOK_PATH),
                        "timeout_seconds": 2,
                    },
                    "pager": {
                        "type": "pagerduty",
                        "routing_key": PAGERDUTY_KEY,
                        "base_url": receiver.url("/pd"),
                        "timeout_seconds": 2,
                    },
                    "mail": {  # nothing listens there: every attempt fails to connect
                        "type": "email",
                        "host": "127.0.0.1",
                        "port": unused_tcp_port(),
                        "starttls": True,
                        "username": "uns",
                        "password": SMTP_PASSWORD,
                        "from": "uns@example.com",
                        "to": ["oncall@example.com"],
                        "local_hostname": "uns.test",
                        "timeout_seconds": 2,
                    },
                }
            )
        )
        for name, mode in (
            ("sec.guaranteed", DeliveryMode.GUARANTEED),
            ("sec.besteffort", DeliveryMode.BEST_EFFORT),
        ):
            await activate_policy(
                db_url,
                name,
                channels=ALL_CHANNELS,
                delivery_mode=mode,
                require_ack=False,
                max_attempts=2,
            )
        clock = ShiftableClock()
        tracer_provider, exporter = span_capture()
        server = await start_server(
            db_url,
            tmp_path,
            clock=clock,
            api_keys_file=str(keys),
            channels_file=str(channels),
            dispatch_enabled=False,
            metrics_listen="127.0.0.1:0",
            tracer_provider=tracer_provider,
        )
        try:
            yield Rig(server, receiver, provider, clock, exporter, Callers(server))
        finally:
            await server.stop()


def dump(message: Message) -> str:
    return json_format.MessageToJson(message)


async def test_planted_secrets_never_leave_configuration(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    send = "NotificationService/SendNotification"

    # Deliveries that succeed, with the planted API key.
    ok = await rig.call("carol", send, send_request(notification_type="sec.guaranteed"))
    assert ok.reason == OK
    await rig.step()

    # Providers that refuse and echo credentials; the SMTP server is not there.
    rig.provider.failing = True
    dead = await rig.call("carol", send, send_request(notification_type="sec.guaranteed"))
    gone = await rig.call("alice", send, send_request(notification_type="sec.besteffort"))
    assert dead.reason == gone.reason == OK
    for _ in range(3):
        await rig.step()
    dead_id = dead.response.notification_id
    got = await rig.call(
        "oscar",
        "NotificationService/GetNotification",
        pb.GetNotificationRequest(notification_id=dead_id),
    )
    assert got.response.notification.dead_letter, got  # every path was exercised
    assert got.response.notification.outcome.error_message

    # Operator actions on the dead letter, then more failures.
    replay = pb.ReplayRequest(notification_id=dead_id, reason="after rotating credentials")
    assert (await rig.call("oscar", "NotificationService/Replay", replay)).reason == OK
    for _ in range(3):
        await rig.step()
    resolve = pb.ResolveFailureRequest(notification_id=dead_id, reason="handled by hand")
    assert (await rig.call("oscar", "NotificationService/ResolveFailure", resolve)).reason == OK

    # Refusals: a wrong key (as bearer and as a bare value), roles, invalid input.
    for authorization in (f"Bearer {WRONG_KEY}", WRONG_KEY, f"Basic {WRONG_KEY}"):
        wrong = await rig.callers.raw(authorization).call(send, send_request())
        rig.seen.append(wrong)
        assert wrong.reason == "UNAUTHENTICATED"
    assert (await rig.call("carol", "NotificationService/Replay", replay)).reason != OK
    assert (await rig.call("carol", send, send_request(title=""))).reason == "INVALID_REQUEST"
    await rig.call(
        "rita", "NotificationService/Acknowledge", pb.AcknowledgeRequest(notification_id=dead_id)
    )

    # The secrets were really used (so their absence below means something).
    seen_by_provider = " ".join(
        f"{r.path} {dict(r.headers)} {r.body.decode(errors='replace')}"
        for r in rig.receiver.requests
    )
    for name in (
        "webhook header token",
        "slack token",
        "slack webhook path",
        "pagerduty routing key",
    ):
        assert SECRETS[name] in seen_by_provider, name

    # Everything observable.
    oscar = rig.caller("oscar")
    places: dict[str, str] = {}
    events = await oscar.history(pb.WatchEventsRequest(replay_history=True))
    assert {t.EVENT_KIND_CHANNEL_ATTEMPT_RESULT, t.EVENT_KIND_REPLAY_REQUESTED} <= {
        e.kind for e in events
    }
    places["events"] = "\n".join(dump(e) for e in events)
    listed = await oscar.call(
        "NotificationService/ListNotifications", pb.ListNotificationsRequest(page_size=1000)
    )
    places["notifications"] = dump(listed.response)
    audit = []
    for n in listed.response.notifications:
        for rpc, request in (
            ("AuditService/ListDeliveryAuditRecords", apb.ListDeliveryAuditRecordsRequest),
            ("AuditService/ListAckAuditRecords", apb.ListAckAuditRecordsRequest),
        ):
            page = await oscar.call(rpc, request(notification_id=n.id))
            audit.append(dump(page.response))
    assert any("errorMessage" in a for a in audit)
    places["audit records"] = "\n".join(audit)
    places["responses and errors"] = "\n".join(
        dump(o.response)
        if o.error is None
        else f"{o.error.message} {o.error.metadata} {o.error.violations}"
        for o in rig.seen
    )
    formatter = JsonFormatter()
    places["logs"] = caplog.text + "\n".join(formatter.format(r) for r in caplog.records)
    places["spans"] = "\n".join(span.to_json() for span in rig.exporter.get_finished_spans())
    assert places["spans"] and places["logs"]
    places["metrics"] = (await scrape(rig.server)).text
    places["database"] = await database_text(rig.server)

    found = {place: leaks(text) for place, text in places.items()}
    assert not any(found.values()), {p: f for p, f in found.items() if f}


async def database_text(server: RunningServer) -> str:
    """Every row of every table, as text."""
    rows: list[str] = []
    async with server.app.db.read() as conn:
        for table in tables.metadata.sorted_tables:
            result = await conn.execute(select(table))
            rows += [repr(dict(row)) for row in result.mappings()]
    return "\n".join(rows)


def test_fragment_search_is_sensitive() -> None:
    """The search itself: a cut or encoded secret is still found, and each finding names
    one secret (no two secrets share a fragment)."""
    for name, secret in SECRETS.items():
        others = [s for n, s in SECRETS.items() if n != name]
        assert not any(f in other for f in fragments(secret) for other in others), name
    assert leaks(f"error: {HEADER_TOKEN[:FRAGMENT]}...") == ["webhook header token (fragment)"]
    assert leaks(quote(SLACK_HOOK_PATH, safe="")) == ["slack webhook path (whole)"]
    assert leaks(base64.b64encode(API_KEY.encode()).decode()) == ["api key (whole)"]
    assert leaks(re.sub(r"\w", "*", HEADER_TOKEN)) == []
    assert not leaks(repr(KEYS))


async def test_api_keys_are_stored_hashed(db_url: str, tmp_path: Path) -> None:
    """A key created the admin way is stored as its SHA-256 (plus a 10-character display
    prefix): the secret is not recoverable from the database, and it authenticates."""
    server = await start_server(db_url, tmp_path, dispatch_enabled=False)
    try:
        secret = await create_key(
            server.app.store, "dora", ["producer"], "security test", datetime.now(UTC)
        )
        stored = await database_text(server)
        assert hash_key(secret) in stored
        shown = secret[: len(KEY_PREFIX) + 6]  # the display prefix is stored on purpose
        hidden = secret[len(shown) :]
        assert len(hidden) >= 32
        assert not any(fragment in stored for fragment in fragments(hidden))
        sent = (
            await Callers(server)
            .raw(f"Bearer {secret}")
            .call("NotificationService/SendNotification", send_request())
        )
        assert sent.reason == OK
    finally:
        await server.stop()
