"""console: the operator console's server time per page on a large database.

The database is built like growth's history (``bench/sqlgen.py``): a seed server makes
one real notification of each kind through the API (delivered on the log channel and
on the loopback webhook, an ack pending, dead letters from a webhook answering 503 and
from one nobody listens on, a resolved failure, a retry scheduled by Retry-After), and
each is cloned in SQL with its events in the proportions of ``MIX``, backdated over
30 days (acks pending and the retry queue over the last day, the newest delivered
traffic over the last hour, so the overview's event window is full).

A second server (``--http-listen``, dispatch off so the due backlog stays put and the
database does not change under the measurement) serves the console; one operator
session asks for each main page in turn and reads the ``Server-Timing`` header the
HTTP middleware adds (the handler's time, queries and rendering included). Then an
idle window with and without an open Server-Sent Events stream counts the server's
CPU and the database's transactions.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import asyncpg
import yaml

from bench import client, sqlgen
from bench.config import Profile
from bench.cpu import CpuMeter
from bench.harness import (
    API_KEY,
    TYPE_ACCEPT,
    TYPE_DELIVER,
    WEBHOOK_CHANNEL,
    WEBHOOK_SECRET,
    Harness,
    ServerChild,
)
from bench.receiver import WebhookReceiver
from bench.stats import Row
from tests.support.postgres import free_port
from uns.v1 import notification_service_pb2 as pb

DATABASE = "uns_console"
TARGET_MS = 100.0
DAY = 24 * 3600.0
MONTH = 30 * DAY
WARMUP_REQUESTS = 2
SEED_WAIT_SECONDS = 60.0

TYPE_ACK = "console.ack"  # log channel, an ack required within a day
TYPE_PAGE = "console.page"  # webhook answering 503: dead letters after one attempt
TYPE_BILLING = "console.billing"  # webhook to a closed port: dead letters
TYPE_RETRY = "console.retry"  # 503 with Retry-After: PENDING, next attempt an hour out
CH_UNAVAILABLE = "bench-unavailable"
CH_DOWN = "bench-down"
POLICIES: list[dict[str, Any]] = [
    {"notification_type": TYPE_ACK, "spec": {"channels": ["log"], "delivery_mode": "GUARANTEED",
     "require_ack": True, "ack_timeout_minutes": 1440}},
    {"notification_type": TYPE_PAGE, "spec": {"channels": [CH_UNAVAILABLE],
     "delivery_mode": "GUARANTEED", "max_attempts": 1}},
    {"notification_type": TYPE_BILLING, "spec": {"channels": [CH_DOWN],
     "delivery_mode": "GUARANTEED", "max_attempts": 1}},
    {"notification_type": TYPE_RETRY, "spec": {"channels": [CH_UNAVAILABLE],
     "delivery_mode": "GUARANTEED", "max_attempts": 5}},
]  # fmt: skip
_UNAVAILABLE = (
    b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 3600\r\ncontent-type: text/plain\r\n"
    b"content-length: 23\r\nconnection: close\r\n\r\nupstream is overloaded\n"
)


@dataclass(frozen=True)
class Kind:
    """One template and its clones: share of the database, spread, column overrides."""

    name: str
    type: str
    share: float
    spread: float = MONTH
    overrides: tuple[tuple[str, str], ...] = ()


# The states an operator sees, roughly as a month of a busy service leaves them.
MIX = (
    Kind("delivered-log", TYPE_ACCEPT, 0.665),
    Kind("delivered-webhook", TYPE_DELIVER, 0.20),
    Kind("ack-pending", TYPE_ACK, 0.02, DAY, (("deadline", "deadline - {shift}"),)),
    Kind("dead-503", TYPE_PAGE, 0.02),
    Kind("dead-down", TYPE_BILLING, 0.01),
    Kind("resolved", TYPE_PAGE, 0.04),
    Kind("due", TYPE_RETRY, 0.01, DAY, (("next_attempt", "now() - {shift}"),)),
    Kind("scheduled", TYPE_RETRY, 0.01, DAY, (("next_attempt", "now() + {shift}"),)),
    Kind("recent", TYPE_ACCEPT, 0.025, 3600.0),  # the last hour's traffic, newest events
)


def counts(total: int) -> dict[str, int]:
    """Rows per kind for a database of ``total`` notifications (the rest: delivered)."""
    out = {k.name: max(1, int(total * k.share)) for k in MIX}
    out["delivered-log"] += total - sum(out.values())
    return out


async def _unavailable_server() -> asyncio.Server:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(_UNAVAILABLE)
            await writer.drain()
        writer.close()

    return await asyncio.start_server(answer, "127.0.0.1", 0)


def _channels(path: Path, receiver_url: str, unavailable_port: int) -> Path:
    hook = {"type": "webhook", "secret": WEBHOOK_SECRET, "timeout_seconds": 5}
    path.write_text(
        yaml.safe_dump(
            {
                WEBHOOK_CHANNEL: {**hook, "url": receiver_url},
                CH_UNAVAILABLE: {**hook, "url": f"http://127.0.0.1:{unavailable_port}/hook"},
                CH_DOWN: {**hook, "url": f"http://127.0.0.1:{free_port()}/hook"},
            }
        )
    )
    return path


async def _send(stub: client.AsyncStub, notification_type: str, key: str) -> str:
    reply = await stub.SendNotification(
        client.send_request(notification_type, key),
        metadata=client.METADATA,
        timeout=client.CALL_TIMEOUT_SECONDS,
    )
    return str(reply.notification_id)


async def _wait_state(conn: asyncpg.Connection, nid: str, sql_condition: str) -> None:
    deadline = time.monotonic() + SEED_WAIT_SECONDS
    while time.monotonic() < deadline:
        if await conn.fetchval(
            f"SELECT count(*) FROM uns_notifications WHERE id = $1 AND {sql_condition}", nid
        ):
            return
        await asyncio.sleep(0.2)
    row = await conn.fetchrow("SELECT status, attempts FROM uns_notifications WHERE id = $1", nid)
    raise RuntimeError(f"console seed {nid}: never reached {sql_condition} ({dict(row or {})})")


WANT = {
    "delivered-log": "status = 'DELIVERED'",
    "delivered-webhook": "status = 'DELIVERED'",
    "ack-pending": "status = 'DELIVERED' AND ack_status = 'PENDING'",
    "dead-503": "status = 'FAILED' AND dead_letter",
    "dead-down": "status = 'FAILED' AND dead_letter",
    "resolved": "status = 'FAILED' AND dead_letter",  # resolved below
    "due": "status = 'PENDING' AND attempts >= 1 AND next_attempt > now()",
}


async def _seed(harness: Harness, channels: Path, tag: str) -> dict[str, str]:
    """One real notification per kind, made by a server: kind name -> notification id."""
    server = harness.start_server("console-seed", DATABASE, channels_file=str(channels))
    templates: dict[str, str] = {}
    try:
        await server.wait_serving()
        async with client.channel(server.target) as chan:
            stub = client.stub(chan)
            for kind in MIX:
                if kind.name in WANT:
                    templates[kind.name] = await _send(stub, kind.type, f"{tag}-seed-{kind.name}")
            conn = await harness.sql(DATABASE)
            try:
                for name, condition in WANT.items():
                    await _wait_state(conn, templates[name], condition)
            finally:
                await conn.close()
            await stub.ResolveFailure(
                pb.ResolveFailureRequest(
                    notification_id=templates["resolved"], reason="handled by phone"
                ),
                metadata=client.METADATA,
                timeout=client.CALL_TIMEOUT_SECONDS,
            )
    finally:
        await server.aclose()
    templates["scheduled"] = templates["due"]
    templates["recent"] = templates["delivered-log"]
    return templates


async def fill(harness: Harness, receiver: WebhookReceiver, total: int, tag: str) -> float:
    """The console database with ``total`` notifications; returns the fill's seconds."""
    dsn = harness.create_database(DATABASE)
    harness.put_policies(DATABASE, POLICIES, harness.run_dir / "console-policies.yaml")
    unavailable = await _unavailable_server()
    try:
        port = unavailable.sockets[0].getsockname()[1]
        channels = _channels(harness.run_dir / "console-channels.yaml", receiver.url(), port)
        templates = await _seed(harness, channels, tag)
    finally:
        unavailable.close()
    started = time.monotonic()
    rows = counts(total)
    for kind in MIX:  # "recent" last: its events are the newest sequences
        await sqlgen.clone(
            dsn,
            templates[kind.name],
            rows[kind.name],
            seed=f"{kind.name}-",
            correlation_prefix=f"{kind.name}-",
            spread_seconds=kind.spread,
            overrides=dict(kind.overrides),
            analyze=False,
        )
    await sqlgen.vacuum_analyze(dsn)
    return time.monotonic() - started


@dataclass(frozen=True)
class Page:
    label: str
    path: str
    # False: a filter no index serves (the list walks created_at order until a page
    # matches); measured and shown, but outside the 100 ms target.
    indexed: bool = True


def _filtered(text: str) -> str:
    return "/console/notifications?filter=" + quote(text)


async def _pages(conn: asyncpg.Connection, http: aiohttp.ClientSession, base: str) -> list[Page]:
    dead = await conn.fetchval(
        "SELECT id FROM uns_notifications WHERE status = 'FAILED' AND dead_letter"
        " ORDER BY created_at DESC LIMIT 1"
    )
    delivered = await conn.fetchval(
        f"SELECT id FROM uns_notifications WHERE notification_type = '{TYPE_DELIVER}'"
        " ORDER BY created_at DESC LIMIT 1"
    )
    async with http.get(base + "/console/notifications") as reply:
        match = re.search(r"page_token=([^\"&]+)", await reply.text())
    second = "/console/notifications?page_token=" + (match.group(1) if match else "")
    return [
        Page("overview", "/console/"),
        Page("notifications", "/console/notifications"),
        Page("notifications, page 2", second),
        Page("notifications, dead letters", _filtered("state = FAILED AND dead_letter = true")),
        Page("notifications, acks pending", _filtered("ack_state = PENDING")),
        Page("notifications, pending", _filtered("state = PENDING")),
        Page("notifications, by type", _filtered(f'notification_type = "{TYPE_BILLING}"')),
        Page("notifications, type with none", _filtered('notification_type = "no.such"')),
        Page("notifications, source with none", _filtered('source = "no-such"'), indexed=False),
        Page("notification (dead letter)", f"/console/notifications/{dead}"),
        Page("notification (delivered)", f"/console/notifications/{delivered}"),
        Page("dead letters by type", "/console/dead-letters?bucket=needs-action&by=type"),
        Page("dead letters by error", "/console/dead-letters?bucket=needs-action&by=error"),
        Page("resolved by error", "/console/dead-letters?bucket=resolved&by=error"),
        Page("policies", "/console/policies"),
        Page("policy", f"/console/policies/{TYPE_ACK}"),
        Page("keys", "/console/keys"),
    ]


async def _transactions(conn: asyncpg.Connection) -> int:
    """Transactions the database has seen (one transaction: a fresh statistics snapshot)."""
    value = await conn.fetchval(
        "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1", DATABASE
    )
    return int(value)


def server_ms(header: str | None) -> float | None:
    """``app;dur=12.3`` -> 12.3."""
    match = re.search(r"\bapp;dur=([0-9.]+)", header or "")
    return float(match.group(1)) if match else None


async def _measure(http: aiohttp.ClientSession, base: str, page: Page, requests: int) -> Row:
    server: list[float] = []
    wall: list[float] = []
    statuses: set[int] = set()
    for n in range(WARMUP_REQUESTS + requests):
        t0 = time.perf_counter()
        async with http.get(base + page.path, allow_redirects=False) as reply:
            body = await reply.read()
            took = (time.perf_counter() - t0) * 1000
            statuses.add(reply.status)
            dur = server_ms(reply.headers.get("Server-Timing"))
        if n >= WARMUP_REQUESTS and dur is not None:
            server.append(dur)
            wall.append(took)
    row = Row(group="uns", name="console", setting=page.label, ops=len(server),
              seconds=sum(wall) / 1000, latencies_ms=server)  # fmt: skip
    wall.sort()
    row.extra.update(path=page.path, indexed=page.indexed, bytes=len(body),
                     client_p50_ms=wall[len(wall) // 2] if wall else None,
                     statuses=sorted(statuses))  # fmt: skip
    if statuses != {200}:
        row.note = f"HTTP {sorted(statuses)}"
    return row


async def sign_in(http: aiohttp.ClientSession, base: str) -> str:
    async with http.post(
        base + "/console/sign-in", data={"api_key": API_KEY, "next": "/console/"},
        allow_redirects=False,
    ) as reply:  # fmt: skip
        cookie = reply.cookies.get("uns_console")
        if reply.status != 303 or cookie is None:
            raise RuntimeError(f"console sign-in refused: HTTP {reply.status}")
        return cookie.value


async def _idle(
    http: aiohttp.ClientSession, base: str, server: ServerChild, harness: Harness,
    seconds: float, settle: float, stream: bool,
) -> Row:  # fmt: skip
    """Server CPU and database transactions over an idle window, with or without one
    console's Server-Sent Events stream open."""
    meter = CpuMeter(lambda: server.pid, harness.postmaster)
    conn = await harness.sql(DATABASE)
    try:
        reader: asyncio.Task[None] | None = None
        if stream:
            response = await http.get(base + "/console/events")
            if response.status != 200:
                raise RuntimeError(f"console stream refused: HTTP {response.status}")

            async def drain() -> None:
                async for _ in response.content:
                    pass

            reader = asyncio.create_task(drain())
        # An idle backend reports its transactions to pg_stat_database up to 10 s late:
        # let the pages' (and the stream's start) arrive before the window opens.
        await asyncio.sleep(settle)
        before = await _transactions(conn)
        meter.start()
        await asyncio.sleep(seconds)
        window = meter.stop()
        await asyncio.sleep(settle)
        after = await _transactions(conn)
        if reader is not None:
            reader.cancel()
            response.close()
    finally:
        await conn.close()
    label = "idle, 1 SSE stream open" if stream else "idle, no console open"
    row = Row(group="uns", name="console idle", setting=label, ops=0, seconds=seconds,
              server_cpu_s=window.server, db_cpu_s=window.db)  # fmt: skip
    # Our own statistics read after ``before`` is in the count.
    row.extra.update(db_transactions=after - before - 1)
    cpu = "-" if window.server is None else f"{window.server * 1000 / seconds:.2f}"
    row.note = f"server {cpu} ms CPU/s, {row.extra['db_transactions']} db transactions"
    return row


async def run(harness: Harness, receiver: WebhookReceiver, profile: Profile, tag: str) -> list[Row]:
    try:
        fill_seconds = await fill(harness, receiver, profile.console_notifications, tag)
        rows = await measure(harness, profile)
    finally:
        await harness.drop_database(DATABASE)
    rows[0].extra.update(fill_seconds=round(fill_seconds, 1))
    return rows


async def measure(harness: Harness, profile: Profile) -> list[Row]:
    """Start the console server on the filled database; every page, then idleness."""
    http_port = free_port()
    base = f"http://127.0.0.1:{http_port}"
    server = harness.start_server(
        "console", DATABASE, http_listen=f"127.0.0.1:{http_port}", dispatch_enabled="false",
        channels_file=str(harness.run_dir / "console-channels.yaml"),
    )  # fmt: skip
    rows: list[Row] = []
    try:
        await server.wait_serving()
        async with aiohttp.ClientSession() as anonymous:
            cookie = await sign_in(anonymous, base)
        headers = {"Cookie": f"uns_console={cookie}"}
        async with aiohttp.ClientSession(headers=headers) as http:
            conn = await harness.sql(DATABASE)
            try:
                pages = await _pages(conn, http, base)
                total = await conn.fetchval("SELECT count(*) FROM uns_notifications")
                events = await conn.fetchval("SELECT count(*) FROM uns_events")
            finally:
                await conn.close()
            for page in pages:
                rows.append(await _measure(http, base, page, profile.console_requests))
            for stream in (False, True):
                idle = await _idle(http, base, server, harness, profile.console_idle_seconds,
                                   profile.console_stats_settle_seconds, stream)  # fmt: skip
                rows.append(idle)
    finally:
        await server.aclose()
    rows[0].extra.update(notifications=total, events=events)
    return rows
