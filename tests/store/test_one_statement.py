"""One round trip per accept and per settle on PostgreSQL (issue 33 item 3), on both
dialects: a new notification is one statement (no BEGIN, no COMMIT) once its type's
ACTIVE revision is known, and one delivery settles in one statement; what that
statement cannot confirm goes the long way with exactly today's answers: replays,
conflicts, a policy activated elsewhere meanwhile, a lease lost before the settle.
SQLite keeps its transactions (no round trips to save)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import pytest
from asyncpg.prepared_stmt import PreparedStatement
from sqlalchemy import func, select

from tests.support.grpc_errors import rich_error
from tests.support.policies import activate_policy
from tests.support.server import RunningServer, ShiftableClock, send_request, start_server
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t
from uns_server.channels.base import ChannelResult
from uns_server.domain.enums import DeliveryMode, EventKind, Status
from uns_server.store import pg
from uns_server.store.tables import events, notification_audit_records, notifications
from uns_server.workers.dispatch import ChannelAttempt, Claim

LEASE_SECONDS = 5.0
_CALLS = ("execute", "executemany", "fetch", "fetchrow", "fetchval", "fetchmany", "prepare")
_PREPARED = ("fetch", "fetchrow", "fetchval", "executemany")


@dataclass
class Writes:
    """Each write the server opened, by kind ("write" or "one_statement"), with the
    SQL it sent to asyncpg (PostgreSQL; BEGIN and COMMIT included)."""

    opened: list[tuple[str, list[str]]] = field(default_factory=list)

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.opened]

    def round_trips(self) -> list[int]:
        return [len(sent) for _, sent in self.opened]


@contextlib.contextmanager
def _asyncpg_calls() -> Iterator[list[tuple[object, str]]]:
    """Every statement sent through asyncpg while active: (connection, SQL)."""
    sent: list[tuple[object, str]] = []
    saved: list[tuple[type, str, Any]] = []

    def counting(original: Any, of: Callable[[Any], tuple[object, str]]) -> Any:
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            sent.append(of((self, *args)))
            return original(self, *args, **kwargs)

        return call

    for name in _CALLS:
        original = getattr(asyncpg.Connection, name)
        saved.append((asyncpg.Connection, name, original))
        setattr(asyncpg.Connection, name, counting(original, lambda a: (a[0], str(a[1]))))
    for name in _PREPARED:
        original = getattr(PreparedStatement, name)
        saved.append((PreparedStatement, name, original))
        of = lambda a: (a[0]._connection, a[0].get_query())  # noqa: E731
        setattr(PreparedStatement, name, counting(original, of))
    try:
        yield sent
    finally:
        for cls, name, original in saved:
            setattr(cls, name, original)


@contextlib.asynccontextmanager
async def counted(server: RunningServer) -> AsyncIterator[Writes]:
    """The server's writes while inside, each with the statements sent on its connection
    while it was open (a connection serves one write at a time)."""
    db = server.app.db
    writes = Writes()
    originals = {"write": db.write, "one_statement": db.one_statement}

    def wrap(kind: str) -> Any:
        @asynccontextmanager
        async def opened() -> AsyncIterator[Any]:
            first, driver = len(sent), None
            try:
                async with originals[kind]() as tx:
                    driver = pg.driver(tx.conn)
                    yield tx
            finally:  # after its COMMIT (or ROLLBACK)
                mine = [sql for conn, sql in sent[first:] if conn is driver]
                writes.opened.append((kind, mine))

        return opened

    with _asyncpg_calls() as sent:
        db.write = wrap("write")  # type: ignore[method-assign]
        db.one_statement = wrap("one_statement")  # type: ignore[method-assign]
        try:
            yield writes
        finally:
            db.write = originals["write"]  # type: ignore[method-assign]
            db.one_statement = originals["one_statement"]  # type: ignore[method-assign]


def _spec(**fields: Any) -> dict[str, Any]:
    spec = {"channels": ["log"], "delivery_mode": DeliveryMode.GUARANTEED, "require_ack": False}
    return spec | fields


@pytest.fixture
async def server(db_url: str, tmp_path: Path) -> AsyncIterator[RunningServer]:
    await activate_policy(db_url, "demo.alert", **_spec(require_ack=False))
    srv = await start_server(
        db_url,
        tmp_path,
        clock=ShiftableClock(),
        dispatch_enabled=False,
        lease_seconds=LEASE_SECONDS,
    )
    try:
        yield srv
    finally:
        await srv.stop()


async def _rows(server: RunningServer) -> int:
    async with server.app.db.read() as conn:
        q = select(func.count()).select_from(notifications)
        return int((await conn.execute(q)).scalar_one())


async def _kinds(server: RunningServer, nid: str) -> list[str]:
    async with server.app.db.read() as conn:
        q = select(events.c.kind).where(events.c.notification_id == nid)
        return [k for (k,) in (await conn.execute(q.order_by(events.c.sequence))).all()]


async def test_a_new_notification_is_one_statement_and_a_replay_reads_first(
    server: RunningServer,
) -> None:
    alice = server.stub("alice")
    postgres = server.app.db.is_postgres
    await alice.SendNotification(send_request(idempotency_key="warm"))  # reads the policy

    async with counted(server) as writes:
        first = await alice.SendNotification(send_request(idempotency_key="k"))
    assert not first.idempotent_replay
    if postgres:  # the append with the row riding in it: no BEGIN, no reads, no COMMIT
        assert writes.kinds() == ["one_statement"]
        assert writes.round_trips() == [1]
        assert writes.opened[0][1][0].startswith("WITH r0 AS (INSERT INTO uns_notifications")
    else:
        assert writes.kinds() == ["write"]

    async with counted(server) as writes:
        again = await alice.SendNotification(send_request(idempotency_key="k"))
        with pytest.raises(grpc.aio.AioRpcError) as clash:
            await alice.SendNotification(send_request(idempotency_key="k", title="other"))
    assert again.idempotent_replay and again.notification_id == first.notification_id
    assert rich_error(clash.value).reason == "IDEMPOTENCY_CONFLICT"
    if postgres:  # the statement finds the key held and writes nothing; then the long way
        assert writes.kinds() == ["one_statement", "write"] * 2
        assert writes.round_trips()[:2] == [1, 4]  # BEGIN, keys, policies, COMMIT
    assert await _rows(server) == 2
    assert await _kinds(server, first.notification_id) == [EventKind.ACCEPTED.value]


async def test_a_policy_activated_elsewhere_applies_to_the_next_send(
    server: RunningServer, db_url: str
) -> None:
    alice = server.stub("alice")
    before = await alice.SendNotification(send_request(idempotency_key="a"))
    also = await alice.SendNotification(send_request(idempotency_key="b"))
    assert (before.require_ack, also.require_ack) == (False, False)
    # Another server (or uns-admin) activates a new revision: this one is not told.
    await activate_policy(db_url, "demo.alert", **_spec(require_ack=True))
    after = await alice.SendNotification(send_request(idempotency_key="c"))
    assert after.require_ack
    again = await alice.SendNotification(send_request(idempotency_key="d"))
    assert again.require_ack


async def test_a_type_without_a_policy_then_with_one(server: RunningServer, db_url: str) -> None:
    alice = server.stub("alice")
    kind = "ops.unpolicied"
    defaults = await alice.SendNotification(
        send_request(idempotency_key="x1", notification_type=kind)
    )
    await alice.SendNotification(send_request(idempotency_key="x2", notification_type=kind))
    mode = (
        DeliveryMode.BEST_EFFORT
        if defaults.delivery_mode == t.DELIVERY_MODE_GUARANTEED
        else DeliveryMode.GUARANTEED
    )
    await activate_policy(db_url, kind, **_spec(delivery_mode=mode))
    after = await alice.SendNotification(send_request(idempotency_key="x3", notification_type=kind))
    assert after.delivery_mode != defaults.delivery_mode


def _ok(claim: Claim) -> list[ChannelAttempt]:
    return [
        ChannelAttempt(ch, ChannelResult.delivered("m"), datetime.now(UTC)) for ch in claim.channels
    ]


async def _audits(server: RunningServer, nid: str) -> int:
    async with server.app.db.read() as conn:
        q = select(func.count()).where(notification_audit_records.c.notification_id == nid)
        return int((await conn.execute(q)).scalar_one())


async def test_one_delivery_settles_in_one_statement(server: RunningServer) -> None:
    dispatcher = server.app.dispatcher
    sent = await server.stub("alice").SendNotification(send_request(idempotency_key="s"))
    [claim] = await dispatcher.claim(1)

    async with counted(server) as writes:
        status = await dispatcher.settlement.submit(claim, _ok(claim))

    assert status == Status.DELIVERED
    if server.app.db.is_postgres:  # the UPDATE and the audit row ride in the append
        assert writes.kinds() == ["one_statement"]
        assert writes.round_trips() == [1]
    else:
        assert writes.kinds() == ["write"]
    assert await _audits(server, sent.notification_id) == 1
    kinds = await _kinds(server, sent.notification_id)
    assert kinds[-1] == EventKind.DELIVERY_RESULT.value


async def test_a_lost_lease_writes_nothing_in_the_statement_and_settles_the_long_way(
    server: RunningServer,
) -> None:
    dispatcher = server.app.dispatcher
    clock = server.app.dispatcher._clock
    assert isinstance(clock, ShiftableClock)
    sent = await server.stub("alice").SendNotification(send_request(idempotency_key="lost"))
    nid = sent.notification_id
    [stale] = await dispatcher.claim(1)
    clock.advance(seconds=LEASE_SECONDS + 1)
    [fresh] = await dispatcher.claim(1)  # another worker's lease now

    async with counted(server) as writes:
        status = await dispatcher.settlement.submit(stale, _ok(stale))

    assert status is None
    if server.app.db.is_postgres:  # the gate held everything back, then the long way
        assert writes.kinds() == ["one_statement", "write"]
    assert (await _kinds(server, nid))[-1] == EventKind.LEASE_LOST.value
    assert await _audits(server, nid) == 0  # no audit row rode through
    assert await dispatcher.settlement.submit(fresh, _ok(fresh)) == Status.DELIVERED
    assert await _audits(server, nid) == 1


@contextlib.asynccontextmanager
async def _first_write_held(server: RunningServer) -> AsyncIterator[tuple[asyncio.Event, Any]]:
    """The server's next intake write waits at its start until ``release`` is set;
    ``entered`` is set once it waits (its group is then in flight)."""
    db, entered, release = server.app.db, asyncio.Event(), asyncio.Event()
    original = db.one_statement

    @asynccontextmanager
    async def held() -> AsyncIterator[Any]:
        db.one_statement = original  # type: ignore[method-assign]
        entered.set()
        await release.wait()
        async with original() as tx:
            yield tx

    db.one_statement = held  # type: ignore[method-assign]
    try:
        yield entered, release
    finally:
        db.one_statement = original  # type: ignore[method-assign]


async def test_callers_who_share_a_group_go_the_long_way_and_one_callers_batch_does_not(
    server: RunningServer,
) -> None:
    """One statement is for one caller's requests: when several callers share a group,
    the long way's longer commit lets more of them join the next one, which under load
    saves more CPU per call than its round trips cost (docs/PERFORMANCE.md)."""
    alice, intake = server.stub("alice"), server.app.intake
    await alice.SendNotification(send_request(idempotency_key="warm"))  # reads the policy
    postgres = server.app.db.is_postgres

    async with counted(server) as writes, _first_write_held(server) as (entered, release):
        first = asyncio.ensure_future(alice.SendNotification(send_request(idempotency_key="g0")))
        if postgres:
            await asyncio.wait_for(entered.wait(), timeout=30)  # its group in flight
        else:  # SQLite has no statement to hold: the first group is simply written
            await first
        others = [
            asyncio.ensure_future(alice.SendNotification(send_request(idempotency_key=f"g{i}")))
            for i in (1, 2, 3)
        ]
        async with asyncio.timeout(30):  # all three wait behind the first
            while postgres and intake.queued < len(others):  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        release.set()
        sent = await asyncio.gather(first, *others)
    assert len({s.notification_id for s in sent}) == 4
    if postgres:  # the first alone in one statement; the three callers' group the long way
        assert writes.kinds() == ["one_statement", "write"]
        assert writes.round_trips()[1] > 1

    async with counted(server) as writes:
        reply = await alice.BatchSendNotifications(
            pb.BatchSendNotificationsRequest(
                requests=[send_request(idempotency_key=f"b{i}") for i in range(3)]
            )
        )
    assert all(r.HasField("response") for r in reply.results)
    if postgres:  # one caller's three requests: one statement, one round trip
        assert writes.kinds() == ["one_statement"]
        assert writes.round_trips() == [1]
