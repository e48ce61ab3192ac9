"""The rest of the store port's conformance suite (``uns_server.store.port``), on
SQLite and PostgreSQL (``db_url``): the audit records, the intake-side notification
writes, the samplers' backlog reads, the callback receipts, retention's deletes and the
WatchEvents horizon, planner statistics (PostgreSQL only)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from tests.conftest import PostgresDatabases
from tests.store.test_conformance import (
    LEASE,
    NOW,
    SECOND,
    WEBHOOK,
    _event,
    claim,
    fetch,
    insert,
    leased_by_its_job,
    leased_by_its_row,
    record,
    row,
)
from uns_server.domain.admission import DedupWindowTake
from uns_server.domain.enums import AckStatus, DeliveryMode, EventKind, Status
from uns_server.store.db import Database
from uns_server.store.port import Backlog, DeliveryAudit, Statistics, UnservedLeader
from uns_server.store.sql_store import SqlStore

OLD = NOW - timedelta(days=30)


async def test_audit_records_are_appended_and_read_back_in_write_order(store: SqlStore) -> None:
    [nid] = await insert(store, row())
    [leased] = await claim(store)
    n = leased.notification
    failed = {"channels_attempted": ["webhook"], "channels_failed": ["webhook"]}
    delivered = {"channels_attempted": ["webhook"], "channels_succeeded": ["webhook"]}
    async with store.write() as tx:
        await tx.audit.record_deliveries([DeliveryAudit(n, Status.PENDING, failed, None)], NOW)
        await tx.events.append([_event(nid, EventKind.DELIVERY_RESULT, {})], NOW)
    async with store.write() as tx:  # nothing appended: the records still go in
        later = NOW + timedelta(seconds=1)
        await tx.audit.record_deliveries(
            [DeliveryAudit(n, Status.DELIVERED, delivered, NOW)], later
        )
        await tx.audit.record_ack(
            nid,
            old_status=AckStatus.PENDING,
            new_status=AckStatus.ACKED,
            actor="bob",
            metadata={"note": "seen"},
            now=later,
            via="link",
        )
    async with store.read() as tx:
        records = await tx.audit.delivery_records(nid, offset=0, limit=10)
        assert [r.status for r in records] == [Status.PENDING, Status.DELIVERED]
        assert records[0].channels_failed == ["webhook"] and records[0].delivered_at is None
        assert records[1].channels_succeeded == ["webhook"] and records[1].delivered_at == NOW
        assert records[1].delivery_mode == DeliveryMode.BEST_EFFORT
        assert await tx.audit.delivery_records(nid, offset=1, limit=10) == records[1:]
        [ack] = await tx.audit.ack_records(nid, offset=0, limit=10)
        assert (ack.old_status, ack.new_status, ack.acked_by, ack.via) == (
            AckStatus.PENDING,
            AckStatus.ACKED,
            "bob",
            "link",
        )
        assert ack.ack_metadata == {"note": "seen"}
        assert await tx.audit.ack_records(nid, offset=1, limit=10) == []


async def test_rows_inserted_before_the_events_append_commit_with_it(store: SqlStore) -> None:
    first, second = row(), row()
    async with store.write() as tx:
        await tx.notifications.insert_before_events([record(first)])
        await tx.events.append([_event(first["id"], EventKind.ACCEPTED, {})], NOW)
    async with store.write() as tx:  # no append: inserted at commit
        await tx.notifications.insert_before_events([record(second)])
    assert (await fetch(store, first["id"]))["key"] == first["key"]
    assert (await fetch(store, second["id"]))["key"] == second["key"]
    async with store.write() as tx:
        locked = await tx.notifications.get_locked(first["id"])
        assert locked is not None and locked.id == first["id"]
        assert await tx.notifications.get_locked("absent") is None


async def test_the_backlog_counts_pending_leaders_by_their_state(store: SqlStore) -> None:
    async with store.read() as tx:
        assert await tx.queue.backlog(NOW) == Backlog(0, 0, 0, None)
    oldest = NOW - timedelta(minutes=3)
    await insert(
        store,
        row(next_attempt=oldest),
        row(next_attempt=NOW - timedelta(minutes=1)),
        row(next_attempt=NOW + timedelta(minutes=1)),  # scheduled
        row(lease_token="t", lease_until=NOW + timedelta(seconds=30)),  # leased
        row(status=Status.DELIVERED.value),  # not pending
    )
    leader = (await insert(store, row()))[0]
    await insert(store, row(dedup_owner_id=leader))  # a follower is not the backlog
    async with store.read() as tx:
        assert await tx.queue.backlog(NOW) == Backlog(3, 1, 1, oldest)


async def test_the_backlog_counts_a_lease_its_job_or_its_row_holds(store: SqlStore) -> None:
    # The running job's lease (the row's own columns cleared), a previous release's on
    # the row (its job not running), and a free leader due as they are.
    await leased_by_its_job(store)
    by_row, _free = await insert(store, row(), row())
    await leased_by_its_row(store, by_row)
    async with store.read() as tx:
        assert await tx.queue.backlog(NOW) == Backlog(1, 2, 0, NOW - SECOND)
        assert await tx.queue.backlog(NOW + LEASE) == Backlog(3, 0, 0, NOW - SECOND)


async def test_unserved_due_names_leaders_whose_channel_nobody_here_serves(
    store: SqlStore,
) -> None:
    since = NOW - timedelta(minutes=10)
    sms, _, _ = await insert(
        store,
        row(channels=["webhook", "sms"], next_attempt=since),
        row(next_attempt=since),  # served here
        row(channels=["sms"], next_attempt=NOW),  # due too recently
    )
    async with store.read() as tx:
        found = await tx.queue.unserved_due(
            WEBHOOK, now=NOW, due_before=NOW - timedelta(minutes=1), limit=10
        )
        assert found == [UnservedLeader(sms, ["webhook", "sms"], since)]
        assert (
            await tx.queue.unserved_due(["webhook", "sms"], now=NOW, due_before=NOW, limit=10) == []
        )


async def test_unserved_due_passes_over_a_lease_its_job_or_its_row_holds(
    store: SqlStore,
) -> None:
    sms = ["webhook", "sms"]
    since = NOW - timedelta(minutes=10)
    by_job = (await leased_by_its_job(store, channels=sms, next_attempt=since)).notification.id
    [by_row] = await insert(store, row(channels=sms, next_attempt=since))
    await leased_by_its_row(store, by_row)

    async def unserved(now: datetime) -> set[str]:
        async with store.read() as tx:
            found = await tx.queue.unserved_due(WEBHOOK, now=now, due_before=NOW, limit=10)
        return {u.notification_id for u in found}

    assert await unserved(NOW) == set()
    assert await unserved(NOW + LEASE) == {by_job, by_row}  # both leases ended


async def test_a_callback_receipt_is_kept_once_until_pruned(store: SqlStore) -> None:
    async with store.write() as tx:
        assert await tx.receipts.record("old", "slack", OLD)
        assert not await tx.receipts.record("old", "slack", NOW)  # a replay
        assert await tx.receipts.record("new", "pagerduty", NOW)
    async with store.write() as tx:
        assert await tx.receipts.prune(NOW - timedelta(days=1)) == 1
    async with store.write() as tx:
        assert await tx.receipts.record("old", "slack", NOW)  # forgotten: taken again
        assert not await tx.receipts.record("new", "pagerduty", NOW)  # still a replay


async def test_retention_deletes_only_what_its_guards_let_go(store: SqlStore) -> None:
    settled = {"status": Status.DELIVERED.value, "created_at": OLD, "updated_at": OLD}
    gone, stays, busy = await insert(store, row(**settled), row(**settled), row(created_at=OLD))
    follower, successor_of = await insert(
        store, row(dedup_owner_id=gone, **settled), row(dedup_successor_id=stays, **settled)
    )
    async with store.write() as tx:
        for nid in (gone, stays, busy):
            await tx.notifications.take_dedup_window(DedupWindowTake(f"w-{nid}", nid, 1, OLD, True))
        live = DedupWindowTake("live", stays, 2, NOW + timedelta(minutes=5), insert=True)
        await tx.notifications.take_dedup_window(live)
        await tx.events.append([_event(n, EventKind.ACCEPTED, {}) for n in (gone, stays)], OLD)
    async with store.write() as tx:
        await tx.events.append([_event(gone, EventKind.DELIVERY_RESULT, {})], NOW)

    async with store.read() as tx:
        assert sorted(await tx.retention.linked_to([gone, stays])) == sorted(
            [(follower, gone), (successor_of, stays)]
        )
        assert await tx.retention.live_window_owners([gone, stays, busy], NOW) == {stays}
        count, highest = await tx.retention.events_of([gone])
        assert count == 2 and highest == await tx.events.high_water()
        assert await tx.retention.stale_events(NOW - timedelta(days=1), [gone]) == (1, 2)
        assert await tx.retention.expirable_keys(NOW, [gone]) == 3  # stays and the linked
        assert await tx.retention.compacted_sequence() == 0

    async with store.write() as tx:
        await tx.retention.lock()
        assert await tx.retention.delete_events_of([gone]) == 2
        assert await tx.retention.delete_stale_events(NOW, up_to_sequence=0) == 0
        assert await tx.retention.delete_stale_events(NOW, up_to_sequence=2) == 1
        windows = [f"w-{nid}" for nid in (gone, stays, busy)]
        assert await tx.retention.delete_windows(windows, NOW) == 2  # busy's owner works
        assert await tx.retention.raise_compacted_sequence(3, NOW) == 3
        assert await tx.retention.raise_compacted_sequence(2, NOW) == 3  # never lower
    async with store.read() as tx:
        assert await tx.retention.compacted_sequence() == 3
        assert await tx.events.read_after(0, limit=10, notification_ids=[gone, stays]) == []


async def test_one_retention_run_holds_the_lock_at_a_time(db_url: str, store: SqlStore) -> None:
    other = SqlStore(Database(db_url))
    order: list[str] = []
    try:
        async with store.write() as tx:
            await tx.retention.lock()

            async def second() -> None:
                async with other.write() as tx2:
                    await tx2.retention.lock()
                    order.append("second")

            waiting = asyncio.create_task(second())
            await asyncio.sleep(0.05)
            order.append("first")
        await waiting
    finally:
        await other.db.dispose()
    assert order == ["first", "second"]


async def test_planner_statistics_are_missing_until_analyzed(
    postgres: PostgresDatabases,
) -> None:
    """PostgreSQL only: SQLite keeps no cached generic plans to correct."""
    store = SqlStore(Database(await postgres.new()))
    try:
        async with store.read() as tx:
            assert await tx.statistics.state(1) == Statistics.TOO_FEW_ROWS
        await insert(store, row())
        async with store.read() as tx:
            assert await tx.statistics.state(1) == Statistics.MISSING
            await tx.statistics.analyze()
        async with store.read() as tx:
            assert await tx.statistics.state(1) == Statistics.ANALYZED
    finally:
        await store.db.dispose()
