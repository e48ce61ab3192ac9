"""Batched settlement on both dialects: deliveries settled in one transaction keep
per-row fencing (a lost lease gets LEASE_LOST, the others settle), two attempts on one
row in one batch settle once, a row that cannot be settled does not hold back the
others, and a commit whose acknowledgement was lost is not recorded twice."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError

from tests.support.server import RunningServer, ShiftableClock, send_request, start_server
from uns_server.channels.base import ChannelResult
from uns_server.domain.enums import EventKind, Status
from uns_server.store.tables import events, notification_audit_records, notifications
from uns_server.workers.dispatch import ChannelAttempt, Claim
from uns_server.workers.dispatch.settlement import Settler

LEASE_SECONDS = 5.0


@pytest.fixture
async def server(db_url: str, tmp_path: Path) -> AsyncIterator[RunningServer]:
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


def _clock(server: RunningServer) -> ShiftableClock:
    clock = server.app.dispatcher._clock
    assert isinstance(clock, ShiftableClock)
    return clock


async def _send(server: RunningServer, count: int, prefix: str) -> list[str]:
    ids = []
    for i in range(count):
        sent = await server.stub("alice").SendNotification(
            send_request(idempotency_key=f"{prefix}-{i}")
        )
        ids.append(str(sent.notification_id))
    return ids


def _ok(claim: Claim, **metadata: Any) -> list[ChannelAttempt]:
    return [
        ChannelAttempt(ch, ChannelResult.delivered("m", metadata=metadata), datetime.now(UTC))
        for ch in claim.channels
    ]


async def _kinds(server: RunningServer, nid: str) -> list[str]:
    async with server.app.db.read() as conn:
        q = select(events.c.kind).where(events.c.notification_id == nid)
        return [k for (k,) in (await conn.execute(q.order_by(events.c.sequence))).all()]


async def _status(server: RunningServer, nid: str) -> str:
    async with server.app.db.read() as conn:
        q = select(notifications.c.status).where(notifications.c.id == nid)
        return str((await conn.execute(q)).scalar_one())


async def _audits(server: RunningServer, nid: str) -> int:
    async with server.app.db.read() as conn:
        q = select(func.count()).where(notification_audit_records.c.notification_id == nid)
        return int((await conn.execute(q)).scalar_one())


def _count_writes(server: RunningServer) -> list[int]:
    """Count write transactions from now on (the list's length)."""
    db = server.app.db
    original = db.write
    opened: list[int] = []

    @asynccontextmanager
    async def counting() -> AsyncIterator[Any]:
        opened.append(1)
        async with original() as tx:
            yield tx

    db.write = counting  # type: ignore[method-assign]
    return opened


async def test_one_transaction_settles_many_and_fences_each_row(server: RunningServer) -> None:
    dispatcher = server.app.dispatcher
    ids = await _send(server, 4, "batch")
    claims = await dispatcher.claim(4)
    assert sorted(c.notification.id for c in claims) == sorted(ids)
    # The first row's lease expires and another worker takes it over.
    _clock(server).advance(seconds=LEASE_SECONDS + 1)
    [fresh] = await dispatcher.claim(1)
    stale = next(c for c in claims if c.notification.id == fresh.notification.id)
    _clock(server).offset -= _clock(server).offset  # back: the other leases still hold
    writes = _count_writes(server)

    statuses = await asyncio.gather(*(dispatcher.settlement.submit(c, _ok(c)) for c in claims))

    # Finished together, settled in one transaction. On PostgreSQL the fenced UPDATEs
    # first ride in the events append, which fails its gate on the lost lease: that
    # transaction rolls back and the batch settles the long way.
    assert len(writes) == (2 if server.app.db.is_postgres else 1)
    for claim, status in zip(claims, statuses, strict=True):
        nid = claim.notification.id
        if claim is stale:
            assert status is None
            assert (await _kinds(server, nid))[-1] == EventKind.LEASE_LOST.value
            assert await _status(server, nid) == Status.PENDING.value
            assert await _audits(server, nid) == 0
        else:
            assert status == Status.DELIVERED
            kinds = await _kinds(server, nid)
            assert kinds[-2:] == [
                EventKind.CHANNEL_ATTEMPT_RESULT.value,
                EventKind.DELIVERY_RESULT.value,
            ]
            assert await _status(server, nid) == Status.DELIVERED.value
            assert await _audits(server, nid) == 1


async def test_a_batch_whose_leases_all_hold_settles_in_one_transaction(
    server: RunningServer,
) -> None:
    dispatcher = server.app.dispatcher
    ids = await _send(server, 3, "held")
    claims = await dispatcher.claim(3)
    writes = _count_writes(server)

    statuses = await asyncio.gather(*(dispatcher.settlement.submit(c, _ok(c)) for c in claims))

    assert statuses == [Status.DELIVERED] * 3
    assert len(writes) == 1
    for nid in ids:
        assert await _status(server, nid) == Status.DELIVERED.value
        assert await _audits(server, nid) == 1
        assert (await _kinds(server, nid))[-1] == EventKind.DELIVERY_RESULT.value


async def test_two_attempts_on_one_row_in_one_batch_settle_once(server: RunningServer) -> None:
    dispatcher = server.app.dispatcher
    [nid] = await _send(server, 1, "twice")
    [stale] = await dispatcher.claim(1)
    _clock(server).advance(seconds=LEASE_SECONDS + 1)
    [fresh] = await dispatcher.claim(1)
    assert stale.notification.id == fresh.notification.id == nid

    statuses = await dispatcher.settlement.settle_many_durably(
        [(fresh, _ok(fresh)), (stale, _ok(stale))]
    )

    assert statuses == [Status.DELIVERED, None]
    kinds = await _kinds(server, nid)
    assert kinds.count(EventKind.DELIVERY_RESULT.value) == 1
    assert kinds.count(EventKind.LEASE_LOST.value) == 1
    assert kinds.count(EventKind.CHANNEL_ATTEMPT_RESULT.value) == 2
    assert await _audits(server, nid) == 1


async def test_a_row_that_cannot_settle_does_not_hold_back_the_others(
    server: RunningServer,
) -> None:
    dispatcher = server.app.dispatcher
    await _send(server, 3, "poison")
    claims = await dispatcher.claim(3)
    bad = claims[1]
    items: list[tuple[Claim, Sequence[ChannelAttempt]]] = [
        (c, _ok(c, unserializable=object()) if c is bad else _ok(c)) for c in claims
    ]

    results = await dispatcher.settlement.settle_many_durably(items)

    assert isinstance(results[1], Exception)
    assert results[0] == results[2] == Status.DELIVERED
    assert await _status(server, bad.notification.id) == Status.PENDING.value  # lease expires
    assert EventKind.DELIVERY_RESULT.value not in await _kinds(server, bad.notification.id)


async def test_a_lost_commit_acknowledgement_is_not_settled_twice(
    server: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    dispatcher = server.app.dispatcher
    ids = await _send(server, 2, "acklost")
    claims = await dispatcher.claim(2)
    original = Settler.settle_batch
    calls = 0

    async def commit_then_fail(
        self: Settler, items: Sequence[tuple[Claim, Sequence[ChannelAttempt]]]
    ) -> list[Status | None]:
        nonlocal calls
        calls += 1
        await original(self, items)
        if calls == 1:
            raise OperationalError("COMMIT", {}, ConnectionError("reply lost"))
        raise AssertionError("settled again")

    monkeypatch.setattr(Settler, "settle_batch", commit_then_fail)
    monkeypatch.setattr("uns_server.workers.dispatch.settlement.SETTLE_RETRY_DELAY_SECONDS", 0.01)

    results = await dispatcher.settlement.settle_many_durably([(c, _ok(c)) for c in claims])

    assert results == [Status.DELIVERED, Status.DELIVERED] and calls == 1
    for nid in ids:
        kinds = await _kinds(server, nid)
        assert kinds.count(EventKind.DELIVERY_RESULT.value) == 1
        assert EventKind.LEASE_LOST.value not in kinds
