"""The pieces every fault test shares: a scriptable webhook provider that records what it
saw, producers that keep the checker's record, uns-server child processes, and the
public-API reads the checker runs on. Everything is loopback and bounded in time."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import os
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2

from tests.reliability import report as reliability_report
from tests.reliability.checker import (
    EventView,
    History,
    NotificationView,
    Receipt,
    Report,
    check,
)
from tests.support.http_receiver import HttpReceiver, RecordedRequest, Reply
from tests.support.policies import activate_policy
from tests.support.process import ServerProcess
from tests.support.server import KEYS, send_request, write_key_file
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import notification_service_pb2_grpc as pb_grpc
from uns.v1 import types_pb2 as t
from uns_server.domain.enums import DeliveryMode

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
CHANNEL = "hook"
PRODUCER, OPERATOR = "alice", "oscar"
# How long a converging test may wait for every obligation to settle.
CONVERGE_SECONDS = 90.0
# The report run (scripts/reliability-report) sizes the scenarios up: at least this many
# acknowledged sends per scenario, faults injected again and again meanwhile. The test
# suite leaves it unset and runs each scenario at its small default size.
SENDS_ENV = "UNS_RELIABILITY_SENDS"
# How long a producer keeps retrying one send whose outcome it did not learn.
RETRY_UNKNOWN_SECONDS = 60.0
# What a producer retries, with the same request (docs/producers.md); a reset
# connection surfaces as UNAVAILABLE. Other unknown outcomes (UNKNOWN, INTERNAL) would be
# server bugs: they are not retried and stay unresolved in the report.
RETRIED_CODES = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED"})


def dialect(database_url: str) -> str:
    """``postgresql`` or ``sqlite``: the report's database column."""
    return "sqlite" if database_url.startswith("sqlite") else "postgresql"


def scaled(default: int) -> int:
    """A scenario's acknowledged-send target: ``default``, or the report run's size."""
    return max(default, int(os.environ.get(SENDS_ENV) or 0))


def rounds(target: int, per_round: int) -> int:
    """How many times to inject a fault while ``target`` sends are acknowledged."""
    return max(1, target // per_round)


def metadata(who: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {KEYS[who]}"),)


# ----------------------------------------------------------------------- the provider


class Provider:
    """A loopback webhook endpoint: ``decide`` picks each reply; every request is a
    :class:`Receipt` (accepted = answered 2xx)."""

    def __init__(self, decide: Callable[[RecordedRequest], Reply] | None = None) -> None:
        self.rx = HttpReceiver()
        self.decide = decide or (lambda _r: Reply())
        self.receipts: list[Receipt] = []
        self.rx.responder = self._respond

    def _respond(self, request: RecordedRequest) -> Reply:
        reply = self.decide(request)
        ok = reply.action == "respond" and 200 <= reply.status < 300
        self.receipts.append(
            Receipt(request.headers.get("webhook-id", ""), ok, request.path, _attempt(request))
        )
        return reply

    def url(self, path: str = "/hook") -> str:
        return self.rx.url(path)

    def ids(self, path: str | None = None) -> set[str]:
        """Notification ids the provider has seen (optionally on one path)."""
        return {
            r.webhook_id.split(":", 1)[0] for r in self.receipts if path is None or r.path == path
        }

    async def __aenter__(self) -> Provider:
        await self.rx.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.rx.stop()


def _attempt(request: RecordedRequest) -> int | None:
    """The attempt number the webhook body carries (``data.attempt``), if readable."""
    try:
        value = request.json()["data"]["attempt"]
    except (ValueError, KeyError, TypeError):
        return None
    return value if isinstance(value, int) else None


def write_channels(directory: Path, url: str, *, timeout_seconds: float = 2.0) -> Path:
    path = directory / f"channels-{abs(hash(url))}.json"
    path.write_text(
        json.dumps(
            {
                CHANNEL: {
                    "type": "webhook",
                    "url": url,
                    "secret": "reliability-test-secret",
                    "timeout_seconds": timeout_seconds,
                }
            }
        )
    )
    return path


async def webhook_policy(db_url: str, notification_type: str, *, max_attempts: int = 20) -> None:
    await activate_policy(
        db_url,
        notification_type,
        channels=[CHANNEL],
        delivery_mode=DeliveryMode.GUARANTEED,
        require_ack=False,
        max_attempts=max_attempts,
    )


# ------------------------------------------------------------------------- the servers


@dataclass
class ServerFactory:
    """Starts uns-server child processes against one database, with test-sized timing."""

    directory: Path
    db_url: str
    lease_seconds: float = 3.0
    concurrency: int = 8
    extra: tuple[str, ...] = ()
    preamble: str = ""  # Python the child runs first (ServerProcess's ``preamble``)
    started: list[ServerProcess] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.keys_file = write_key_file(self.directory)

    async def start(
        self,
        *,
        channels_file: Path | None = None,
        db_url: str | None = None,
        wait: bool = True,
        **flags: Any,
    ) -> ServerProcess:
        args = [
            "--database-url",
            db_url or self.db_url,
            "--api-keys-file",
            str(self.keys_file),
            "--lease-seconds",
            str(self.lease_seconds),
            "--dispatch-concurrency",
            str(self.concurrency),
            "--idle-poll-seconds",
            "0.5",
            "--watch-heartbeat-seconds",
            "1",
            "--db-retry-seconds",
            "0.5",
            "--shutdown-grace-seconds",
            "1",
            "--log-format",
            "text",
            # Faults are the subject here, not request budgets: never shed a producer.
            "--rate-limit-per-second",
            "0",
            *self.extra,
        ]
        if channels_file is not None:
            args += ["--channels-file", str(channels_file)]
        for name, value in flags.items():
            args += ["--" + name.replace("_", "-"), str(value)]
        server = ServerProcess(self.directory, *args, preamble=self.preamble)
        self.started.append(server)
        if wait:
            await asyncio.to_thread(server.wait_serving)
        return server

    def stop_all(self) -> None:
        for server in self.started:
            if server.proc.poll() is None:
                with contextlib.suppress(Exception):
                    server.proc.kill()  # SIGCONT is not needed for SIGKILL
            server.stop()


async def health(server: ServerProcess) -> int | None:
    return await asyncio.to_thread(server.health)


async def wait_health(server: ServerProcess, status: int, within: float) -> float:
    """Poll health until ``status``; returns the seconds it took."""
    start = time.monotonic()
    deadline = start + within
    while time.monotonic() < deadline:
        if await health(server) == status:
            return time.monotonic() - start
        await asyncio.sleep(0.2)
    raise AssertionError(
        f"health never became {status} within {within}s; server log tail:\n"
        + server.output()[-3000:]
    )


# ------------------------------------------------------------------------ the producers


@dataclass
class Producers:
    """Send notifications, keep the checker's record. ``target`` may change while running
    (a restarted server listens elsewhere)."""

    history: History
    notification_type: str
    prefix: str
    target: str
    call_timeout: float = 5.0
    retry_unknown_seconds: float = RETRY_UNKNOWN_SECONDS
    _next: int = 0
    _channels: dict[str, grpc.aio.Channel] = field(default_factory=dict)
    errors: list[tuple[float, str]] = field(default_factory=list)  # (monotonic, code)
    answered_ok: list[float] = field(default_factory=list)  # monotonic time of each OK

    def _stub(self) -> pb_grpc.NotificationServiceStub:
        target = self.target
        if target not in self._channels:
            self._channels[target] = grpc.aio.insecure_channel(target)
        return pb_grpc.NotificationServiceStub(self._channels[target])

    def _key(self) -> str:
        self._next += 1
        return f"{self.prefix}-{self._next:05d}"

    async def send_one(self, key: str | None = None) -> str | None:
        """One SendNotification call; the notification id on OK, else None."""
        key = key or self._key()
        request = send_request(
            notification_type=self.notification_type,
            idempotency_key=key,
            title=f"reliability {key}",
            source="reliability",
        )
        try:
            reply = await self._stub().SendNotification(
                request, metadata=metadata(PRODUCER), timeout=self.call_timeout
            )
        except grpc.aio.AioRpcError as err:
            code = err.code().name
            self.history.error(key, code)
            self.errors.append((time.monotonic(), code))
            return None
        self.history.ok(key, reply.notification_id)
        self.answered_ok.append(time.monotonic())
        return str(reply.notification_id)

    async def send_until_known(self, key: str | None = None) -> str | None:
        """Send, and while the outcome is unknown (UNAVAILABLE, DEADLINE_EXCEEDED, a
        reset connection) retry with the same idempotency key, as docs/producers.md
        asks; gives up after :data:`RETRY_UNKNOWN_SECONDS` (the outcome stays unknown).
        The notification id on OK, else None."""
        key = key or self._key()
        give_up = time.monotonic() + self.retry_unknown_seconds
        delay = 0.1
        while True:
            nid = await self.send_one(key)
            if nid is not None:
                return nid
            if self.history.sends[key].codes[-1] not in RETRIED_CODES:
                return None  # a definite refusal (or a server bug: not retried)
            if time.monotonic() + delay > give_up:
                return None
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def send(self, count: int, concurrency: int = 4) -> None:
        """Send ``count`` notifications, ``concurrency`` at a time."""
        keys = [self._key() for _ in range(count)]
        queue = iter(keys)

        async def worker() -> None:
            for key in queue:
                await self.send_until_known(key)

        await asyncio.gather(*(worker() for _ in range(concurrency)))

    @contextlib.asynccontextmanager
    async def steady(
        self, concurrency: int = 2, pause: float = 0.05, limit: int = 400
    ) -> AsyncIterator[None]:
        """Keep sending in the background (at most ``limit``) while the block runs."""
        stop = asyncio.Event()

        async def worker() -> None:
            # A send in progress is finished (retried until its outcome is known or the
            # retry budget is spent) even after the block ends.
            while not stop.is_set() and self._next < limit:
                if await self.send_until_known() is None:
                    await asyncio.sleep(0.2)  # back off a little while the server is sick
                else:
                    await asyncio.sleep(pause)

        tasks = [asyncio.create_task(worker()) for _ in range(concurrency)]
        try:
            yield
        finally:
            stop.set()
            await asyncio.gather(*tasks)

    async def wait_acknowledged(self, count: int, within: float = 30.0) -> None:
        deadline = time.monotonic() + within
        while len(self.history.acknowledged) < count:
            assert time.monotonic() < deadline, (
                f"only {len(self.history.acknowledged)} of {count} sends acknowledged "
                f"({self._next} keys used); codes {dict(self.history.codes)}"
            )
            await asyncio.sleep(0.1)

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()


# ------------------------------------------------------------ reading the public API


async def list_notifications(target: str, notification_type: str) -> list[NotificationView]:
    views: list[NotificationView] = []
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.NotificationServiceStub(channel)
        token = ""
        while True:
            reply = await stub.ListNotifications(
                pb.ListNotificationsRequest(
                    filter=f'notification_type = "{notification_type}"',
                    page_size=1000,
                    page_token=token,
                ),
                metadata=metadata(OPERATOR),
                timeout=10,
            )
            views.extend(NotificationView.from_proto(n) for n in reply.notifications)
            token = reply.next_page_token
            if not token:
                return views


async def get_missing(target: str, ids: Iterable[str]) -> list[NotificationView]:
    """GetNotification for each id (those the listing did not return): NOT_FOUND -> absent."""
    found: list[NotificationView] = []
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.NotificationServiceStub(channel)
        for nid in ids:
            try:
                reply = await stub.GetNotification(
                    pb.GetNotificationRequest(notification_id=nid),
                    metadata=metadata(OPERATOR),
                    timeout=10,
                )
            except grpc.aio.AioRpcError as err:
                if err.code() != grpc.StatusCode.NOT_FOUND:
                    raise
                continue
            found.append(NotificationView.from_proto(reply.notification))
    return found


async def replay_events(
    target: str, notification_type: str = "", *, within: float = 30.0
) -> list[EventView]:
    """Every event so far (WatchEvents, replay_history, as operator), until the stream
    reports it has caught up (the first heartbeat)."""
    events: list[EventView] = []
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.NotificationServiceStub(channel)
        call = stub.WatchEvents(
            pb.WatchEventsRequest(notification_type=notification_type, replay_history=True),
            metadata=metadata(OPERATOR),
        )
        try:
            async with asyncio.timeout(within):
                async for response in call:
                    if response.HasField("heartbeat"):
                        break
                    events.append(EventView.from_proto(response.event))
        finally:
            call.cancel()
    return events


def _types(notification_types: str | Sequence[str]) -> list[str]:
    if isinstance(notification_types, str):
        return [notification_types]
    return list(notification_types)


async def pg_activity(database_url: str) -> str:
    """Sessions and their locks on the test database (a diagnostic for stuck tests)."""
    import asyncpg
    from sqlalchemy.engine import make_url

    url = make_url(database_url)
    conn = await asyncpg.connect(
        url.set(drivername="postgresql").render_as_string(hide_password=False)
    )
    try:
        rows = await conn.fetch(
            "SELECT a.pid, a.client_port, a.state, a.wait_event_type, a.wait_event,"
            " now() - a.state_change AS for, left(a.query, 60) AS query,"
            " (SELECT string_agg(l.locktype || ':' || l.mode || ':' || l.granted, ',')"
            "    FROM pg_locks l WHERE l.pid = a.pid AND l.locktype <> 'virtualxid') AS locks"
            " FROM pg_stat_activity a WHERE a.datname = $1 AND a.pid <> pg_backend_pid()",
            url.database,
        )
    finally:
        await conn.close()
    return "\n".join(str(dict(r)) for r in rows)


async def wait_settled(
    target: Callable[[], str],
    notification_types: str | Sequence[str],
    history: History,
    *,
    within: float = CONVERGE_SECONDS,
    database_url: str | None = None,
) -> list[NotificationView]:
    """Poll until every acknowledged notification is listed and none of these types is
    PENDING (every obligation settled)."""
    deadline = time.monotonic() + within
    views: list[NotificationView] = []
    while True:
        try:
            views = []
            for notification_type in _types(notification_types):
                views += await list_notifications(target(), notification_type)
        except grpc.aio.AioRpcError:
            views = []
        else:
            known = {v.id for v in views}
            pending = [v for v in views if v.state == "PENDING"]
            missing = set(history.acknowledged) - known
            if not pending and not missing:
                return views
        if time.monotonic() > deadline:
            sample = [
                (v.id, v.attempts, v.next_attempt_time) for v in views if v.state == "PENDING"
            ]
            activity = await pg_activity(database_url) if database_url else ""
            raise AssertionError(
                f"not settled within {within}s: {len(sample)} pending, e.g. {sample[:5]}\n"
                + activity
            )
        await asyncio.sleep(0.5)


async def run_checker(
    target: str,
    notification_types: str | Sequence[str],
    history: History,
    receipts: Sequence[Receipt],
    *,
    label: str,
    database: str = "postgresql",
    provider_channels: Sequence[str] = (CHANNEL,),
) -> Report:
    """Read everything back through the public API (as operator) and check it."""
    views: list[NotificationView] = []
    events: list[EventView] = []
    types = _types(notification_types)
    for notification_type in types:
        views += await list_notifications(target, notification_type)
    listed = {v.id for v in views}
    views += await get_missing(target, set(history.acknowledged) - listed)
    events = await replay_events(target, types[0] if len(types) == 1 else "")
    report = check(
        history,
        views,
        events,
        receipts,
        now=dt.datetime.now(dt.UTC),
        provider_channels=provider_channels,
    )
    print(f"\n[checker] {database} {label}: {report.summary()} codes={dict(history.codes)}")
    reliability_report.record(label, report, dict(history.codes), database=database)
    return report


def event_kind(kind: str) -> int:
    return int(t.EventKind.Value(f"EVENT_KIND_{kind}"))
