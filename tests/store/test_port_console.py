"""The console's port (``uns_server.store.port.console``) on SQLite and PostgreSQL: its
sessions' rows, and each bounded page read counting what it says and stopping at its
cap."""

from __future__ import annotations

from datetime import timedelta

from tests.store.test_conformance import (
    LEASE,
    NOW,
    _event,
    insert,
    leased_by_its_job,
    leased_by_its_row,
    row,
)
from tests.store.test_port_directory import _spec
from uns_server.domain.enums import AckStatus, EventKind, Status
from uns_server.store.sql_store import SqlStore

HOUR = timedelta(hours=1)


async def test_a_session_is_inserted_found_touched_removed_and_purged(store: SqlStore) -> None:
    async with store.write() as tx:
        for id_hash, expires in (("live", NOW + HOUR), ("old", NOW - HOUR), ("gone", NOW)):
            await tx.console_sessions.insert(
                id_hash=id_hash,
                principal="oscar",
                key_hash="k" * 64,
                csrf_token=f"csrf-{id_hash}",
                now=NOW - 2 * HOUR,
                expires_at=expires,
            )
    async with store.write() as tx:
        await tx.console_sessions.touch("live", NOW)
        assert await tx.console_sessions.purge_expired(NOW) == 2  # at or past expiry
    async with store.read() as tx:
        live = await tx.console_sessions.by_hash("live")
        assert await tx.console_sessions.by_hash("old") is None
        assert await tx.console_sessions.by_hash("gone") is None
    assert live is not None
    assert (live.principal, live.csrf_token) == ("oscar", "csrf-live")
    assert (live.created_at, live.last_seen_at, live.expires_at) == (
        NOW - 2 * HOUR,
        NOW,
        NOW + HOUR,
    )
    async with store.write() as tx:
        await tx.console_sessions.remove("live")
    async with store.read() as tx:
        assert await tx.console_sessions.by_hash("live") is None


async def test_queue_counts_split_pending_rows_and_stop_at_the_cap(store: SqlStore) -> None:
    leader = row()
    await insert(
        store,
        leader,
        row(),  # due
        row(lease_until=NOW + HOUR, lease_token="t"),  # in flight
        row(next_attempt=NOW + HOUR),  # scheduled
        row(lease_until=NOW - HOUR, lease_token="t"),  # an expired lease: due again
        row(status=Status.DELIVERED.value),  # not pending: not counted
    )
    await insert(store, row(dedup_owner_id=leader["id"], dedup_key="k"))  # a follower
    async with store.read() as tx:
        counts, over = await tx.console.queue_counts(NOW, 100)
        assert counts == {"due": 3, "in_flight": 1, "scheduled": 1}
        assert not over
        _, over = await tx.console.queue_counts(NOW, 5)  # six pending rows
        assert over


async def test_queue_counts_count_a_lease_its_job_or_its_row_holds_in_flight(
    store: SqlStore,
) -> None:
    # The running job's lease (the row's own columns cleared), a previous release's on
    # the row (its job not running), and a free leader due as they are.
    await leased_by_its_job(store)
    by_row, _free = await insert(store, row(), row())
    await leased_by_its_row(store, by_row)
    async with store.read() as tx:
        counts, _ = await tx.console.queue_counts(NOW, 100)
        assert counts == {"due": 1, "in_flight": 2, "scheduled": 0}
        counts, _ = await tx.console.queue_counts(NOW + LEASE, 100)
        assert counts == {"due": 3, "in_flight": 0, "scheduled": 0}


async def test_state_counts_count_each_card_up_to_its_cap(store: SqlStore) -> None:
    pending = AckStatus.PENDING.value
    await insert(
        store,
        row(status=Status.DELIVERED.value, created_at=NOW - HOUR),
        row(status=Status.DELIVERED.value, created_at=NOW - timedelta(days=2)),  # too old
        row(status=Status.FAILED.value, dead_letter=True),
        row(status=Status.FAILED.value, dead_letter=True),
        row(status=Status.FAILED.value, dead_letter=False),
        row(status=Status.DELIVERED.value, ack_status=pending, deadline=NOW + 30 * (HOUR / 60)),
        row(status=Status.DELIVERED.value, ack_status=pending, deadline=NOW + 3 * HOUR),
        row(status=Status.DELIVERED.value, ack_status=pending, deadline=NOW - HOUR),  # past
    )
    async with store.read() as tx:
        assert await tx.console.state_counts(NOW, 100) == {
            "delivered_24h": 4,  # the three acks were created a minute ago
            "needs_action": 2,
            "resolved": 1,
            "acks_pending": 2,
            "acks_due_1h": 1,
        }
        capped = await tx.console.state_counts(NOW, 1)
    assert capped["delivered_24h"] == 2  # counted to cap + 1, shown as "1+"
    assert capped["resolved"] == 1


async def test_failed_lists_one_bucket_newest_first(store: SqlStore) -> None:
    dead = [
        row(status=Status.FAILED.value, dead_letter=True, created_at=NOW - timedelta(minutes=m))
        for m in (3, 1, 2)
    ]
    resolved = row(status=Status.FAILED.value, dead_letter=False, channels=["log", "hook"])
    await insert(store, *dead, resolved, row())
    async with store.read() as tx:
        listed = await tx.console.failed(dead_letter=True, limit=2)
        assert [f.id for f in listed] == [dead[1]["id"], dead[2]["id"]]
        [other] = await tx.console.failed(dead_letter=False, limit=10)
    assert (other.id, other.title, other.channels) == (resolved["id"], "t", ("log", "hook"))


async def test_recent_events_read_kinds_since_a_time_within_a_window(store: SqlStore) -> None:
    result = EventKind.CHANNEL_ATTEMPT_RESULT
    async with store.write() as tx:
        await tx.events.append([_event("a", result, {"channel": "hook", "success": True})], NOW)
        await tx.events.append([_event("b", result, {"channel": "hook"})], NOW - 2 * HOUR)
        await tx.events.append([_event("c", EventKind.ACCEPTED, {})], NOW)
        await tx.events.append(
            [_event("d", EventKind.DELIVERY_RESULT, {"status": "DELIVERED"})], NOW
        )
    kinds = [result, EventKind.DELIVERY_RESULT]
    async with store.read() as tx:
        recent = await tx.console.recent_events(kinds, NOW - HOUR, 10)
        assert [(e.notification_id, e.channel, e.success, e.status) for e in recent] == [
            ("a", "hook", True, None),
            ("d", None, None, "DELIVERED"),
        ]
        # Only the newest sequence is in a window of one.
        assert [
            e.notification_id for e in await tx.console.recent_events(kinds, NOW - HOUR, 1)
        ] == ["d"]


async def test_created_at_policy_types_and_a_timeline(store: SqlStore) -> None:
    a, b = row(created_at=NOW - HOUR), row()
    await insert(store, a, b)
    async with store.write() as tx:
        for name in ("ops.b", "ops.a", "ops.c"):
            await tx.policies.put_revision(name, _spec(["log"]), actor="op", now=NOW)
        await tx.policies.activate("ops.b", 1, now=NOW)
        for n in range(4):
            await tx.events.append([_event(a["id"], EventKind.ACCEPTED, {"n": n})], NOW)
    async with store.read() as tx:
        created = await tx.console.created_at([a["id"], b["id"], "nope"])
        assert created == {a["id"]: NOW - HOUR, b["id"]: b["created_at"]}
        types = await tx.console.policy_types(2)
        assert [(t.notification_type, t.active_revision) for t in types] == [
            ("ops.a", None),
            ("ops.b", 1),
        ]
        timeline = await tx.console.notification_events(a["id"], 3)
    assert [e.payload["n"] for e in timeline] == [1, 2, 3]  # the newest three, oldest first
