"""A settlement that opens an ack inserts its ``ack_deadline`` job in the same commit,
on every settle path of ``store.dispatch`` (``settle_many``, ``settle_leased``,
``settle_leased_with_events`` riding in the events append, and PostgreSQL's one
statement), for the moves that landed and only those; on both dialects."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select

from tests.store.test_conformance import LEASE, NOW, _event, claim, insert, row
from uns_server.domain import moves
from uns_server.domain.enums import AckStatus, EventKind, Status
from uns_server.domain.lifecycle import Settlement
from uns_server.store.port import FenceMoved
from uns_server.store.sql_store import SqlStore
from uns_server.store.tables import jobs

DEADLINE = NOW + timedelta(hours=1)
HALF = NOW + LEASE / 2


def _opens_ack(nid: str, token: str) -> moves.SettleAttempt:
    """A delivery of a notification that requires an ack: PENDING until ``DEADLINE``."""
    delivered = Settlement(
        Status.DELIVERED,
        False,
        {},
        delivered_at=NOW,
        ack_status=AckStatus.PENDING,
        deadline=DEADLINE,
    )
    return moves.SettleAttempt(nid, token, delivered, 1, 1)


def _plain(nid: str, token: str) -> moves.SettleAttempt:
    return moves.SettleAttempt(
        nid, token, Settlement(Status.DELIVERED, False, {}, delivered_at=NOW), 1, 1
    )


async def _timers(store: SqlStore) -> list[tuple[Any, ...]]:
    async with store.db.read() as conn:
        q = select(
            jobs.c.notification_id, jobs.c.kind, jobs.c.state, jobs.c.scheduled_at, jobs.c.args
        ).where(jobs.c.kind != "delivery")  # the timers only
        return [tuple(r) for r in (await conn.execute(q.order_by(jobs.c.notification_id))).all()]


def _timer(nid: str) -> tuple[Any, ...]:
    return (nid, "ack_deadline", "available", DEADLINE, {})


async def _leased(store: SqlStore, count: int) -> tuple[list[str], dict[str, str]]:
    ids = sorted(await insert(store, *(row(require_ack=True) for _ in range(count))))
    return ids, {a.notification.id: a.lease_token for a in await claim(store)}


async def test_settle_many_inserts_a_timer_for_each_landed_ack(store: SqlStore) -> None:
    (a, b, c), leases = await _leased(store, 3)
    async with store.write() as tx:
        changed = await tx.dispatch.settle_many(
            [
                _opens_ack(a, leases[a]),
                _opens_ack(a, leases[a]),  # the first released the lease: one timer
                _opens_ack(b, str(uuid.uuid4())),  # lost its fence: no timer
                _plain(c, leases[c]),  # opens no ack: no timer
            ],
            NOW,
        )
    assert changed == {a, c}
    assert await _timers(store) == [_timer(a)]


async def test_settle_leased_inserts_a_timer_for_each_landed_ack(store: SqlStore) -> None:
    (a, b, c), leases = await _leased(store, 3)
    async with store.write() as tx:
        changed = await tx.dispatch.settle_leased(
            [_opens_ack(a, leases[a]), _opens_ack(b, str(uuid.uuid4())), _opens_ack(c, leases[c])],
            HALF,
        )
    assert changed == {(a, leases[a]), (c, leases[c])}
    assert await _timers(store) == [_timer(a), _timer(c)]


async def test_an_expired_lease_opens_no_ack_and_no_timer(store: SqlStore) -> None:
    (a,), leases = await _leased(store, 1)
    async with store.write() as tx:
        assert await tx.dispatch.settle_leased([_opens_ack(a, leases[a])], NOW + LEASE) == set()
    assert await _timers(store) == []


async def test_riding_settles_insert_the_timers_with_the_events_or_nothing(
    store: SqlStore,
) -> None:
    (a, b), leases = await _leased(store, 2)
    K = EventKind.DELIVERY_RESULT

    with pytest.raises(FenceMoved):  # one lease not held: the whole write rolls back
        async with store.write() as tx:
            settled = [_opens_ack(a, leases[a]), _opens_ack(b, str(uuid.uuid4()))]
            await tx.dispatch.settle_leased_with_events(settled, HALF)
            await tx.events.append([_event(a, K, {}), _event(b, K, {})], HALF)
    assert await _timers(store) == []

    async with store.write() as tx:
        settled = [_opens_ack(a, leases[a]), _opens_ack(b, leases[b])]
        await tx.dispatch.settle_leased_with_events(settled, HALF)
        await tx.events.append([_event(a, K, {}), _event(b, K, {})], HALF)
    assert await _timers(store) == [_timer(a), _timer(b)]


async def test_one_statement_settle_inserts_its_timer_or_nothing(store: SqlStore) -> None:
    if not store.writes_in_one_statement:
        pytest.skip("one statement without a transaction block: PostgreSQL only")
    (a, b), leases = await _leased(store, 2)
    K = EventKind.DELIVERY_RESULT

    with pytest.raises(FenceMoved):
        async with store.one_statement() as tx:
            await tx.dispatch.settle_leased_with_events([_opens_ack(a, "not-its-token")], HALF)
            await tx.events.append([_event(a, K, {})], HALF)
    assert await _timers(store) == []

    async with store.one_statement() as tx:
        await tx.dispatch.settle_leased_with_events([_opens_ack(b, leases[b])], HALF)
        await tx.events.append([_event(b, K, {})], HALF)
    assert await _timers(store) == [_timer(b)]
