"""The store port's directory (``uns_server.store.port.directory``) and the listing
reads of notifications, on SQLite and PostgreSQL (``db_url``): API keys, revoked
action links, policy revisions, people and rotations, the event tail."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.store.test_conformance import (
    MINUTE,
    NOW,
    SECOND,
    _event,
    claim,
    fetch,
    insert,
    leased_by_its_job,
    leased_by_its_row,
    retried_while_waiting,
    row,
)
from tests.support.documents import document, effective
from uns_server.domain.enums import DeliveryMode, EventKind, Status
from uns_server.domain.maintenance import ClaimHold, MaintenanceWindow
from uns_server.domain.people import Contact, Recipient, Rotation
from uns_server.domain.policy import PolicySpec
from uns_server.domain.targets import Target
from uns_server.store.port import MissingPeople, StillReferenced
from uns_server.store.sql_store import SqlStore


async def test_api_keys_are_found_by_digest_until_revoked(store: SqlStore) -> None:
    async with store.write() as tx:
        await tx.api_keys.lock_dev_key()
        for n in (1, 2):
            await tx.api_keys.insert(
                key_id=f"id-{n}",
                key_hash=f"hash-{n}",
                prefix=f"uns_{n}",
                principal="alice",
                roles=["producer"],
                responds_for=["bob"] if n == 2 else [],
                description=f"key {n}",
                now=NOW + timedelta(seconds=n),
            )
    async with store.read() as tx:
        assert await tx.api_keys.count_active() == 2
        found = await tx.api_keys.active_by_hash("hash-2")
        assert found is not None and (found.id, found.responds_for) == ("id-2", ("bob",))
        assert [k.id for k in await tx.api_keys.list_keys()] == ["id-1", "id-2"]
    async with store.write() as tx:
        assert await tx.api_keys.revoke("uns_2", NOW) == 1  # by prefix
        assert await tx.api_keys.revoke("id-2", NOW) == 0  # already revoked
    async with store.read() as tx:
        assert await tx.api_keys.active_by_hash("hash-2") is None
        assert await tx.api_keys.count_active() == 1
        assert [k.revoked_at for k in await tx.api_keys.list_keys()] == [None, NOW]


async def test_an_action_link_is_revoked_once(store: SqlStore) -> None:
    [nid] = await insert(store, row())
    async with store.write() as tx:
        assert not await tx.action_links.is_revoked("digest")
        await tx.action_links.revoke("digest", nid, actor="bob", now=NOW)
        await tx.action_links.revoke("digest", nid, actor="carol", now=NOW)  # no error
    async with store.read() as tx:
        assert await tx.action_links.is_revoked("digest")


def _spec(channels: list[str]) -> PolicySpec:
    return PolicySpec.build(channels, DeliveryMode.GUARANTEED, False)


async def test_policy_revisions_are_kept_and_one_is_active(store: SqlStore) -> None:
    async with store.write() as tx:
        first = await tx.policies.put_revision("t", _spec(["log"]), actor="op", now=NOW)
        same = await tx.policies.put_revision("t", _spec(["log"]), actor="op", now=NOW)
        second = await tx.policies.put_revision("t", _spec(["webhook"]), actor="op", now=NOW)
        assert same.revision == first.revision  # identical content: no new revision
        assert await tx.policies.active("t") is None
        activated = await tx.policies.activate("t", second.revision, now=NOW)
        assert activated is not None and activated.active
        assert await tx.policies.activate("t", 99, now=NOW) is None
    async with store.read() as tx:
        active = await tx.policies.active("t")
        assert active is not None and active.spec.channels == ("webhook",)
        assert (await tx.policies.active_many(["t", "other"])).keys() == {"t"}
        got = await tx.policies.get("t", first.revision)
        assert got is not None and got.spec.channels == ("log",)
        newest = await tx.policies.list_revisions("t", before_revision=None, limit=10)
        assert [r.revision for r in newest] == [second.revision, first.revision]
        older = await tx.policies.list_revisions("t", before_revision=second.revision, limit=10)
        assert [r.revision for r in older] == [first.revision]


def _person(recipient_id: str) -> Recipient:
    return Recipient(recipient_id, recipient_id.title(), "UTC", (Contact("webhook", "x"),))


async def test_people_and_rotations_are_kept_with_their_references(store: SqlStore) -> None:
    rotation = Rotation("r", ("ann", "bob"), NOW, timedelta(days=1), "UTC")
    async with store.write() as tx:
        for rid in ("ann", "bob", "cy"):
            stored = await tx.people.put_recipient(_person(rid), actor="op", now=NOW)
            assert stored.updated_by == "op"
    bad = Rotation("bad", ("nobody",), NOW, timedelta(days=1), "UTC")
    with pytest.raises(MissingPeople):  # and the transaction rolls back
        async with store.write() as tx:
            await tx.people.put_rotation(bad, actor="op", now=NOW)
    async with store.write() as tx:
        await tx.people.put_rotation(rotation, actor="op", now=NOW)
    async with store.read() as tx:
        got = await tx.people.get_recipient("ann")
        assert got is not None and got.contacts == (Contact("webhook", "x"),)
        page = await tx.people.list_recipients(after="ann", limit=1)
        assert [p.recipient_id for p in page] == ["bob"]
        assert (await tx.people.recipients_by_id(["ann", "zed"])).keys() == {"ann"}
        assert await tx.people.existing_recipients(["ann", "zed"]) == {"ann"}
        found = await tx.people.get_rotation("r")
        assert found is not None and found.members == ("ann", "bob")
        assert [r.rotation_id for r in await tx.people.list_rotations(after=None, limit=5)] == ["r"]
        assert (await tx.people.rotations_by_id(["r", "gone"])).keys() == {"r"}
        assert await tx.people.existing_rotations(["r", "gone"]) == {"r"}
        assert list(await tx.people.referencing_rotations("bob")) == ["r"]
    with pytest.raises(StillReferenced):
        async with store.write() as tx:
            await tx.people.delete_recipient(_person("bob"), actor="op", now=NOW)
    async with store.write() as tx:
        await tx.people.delete_rotation(rotation, actor="op", now=NOW)
        await tx.people.delete_recipient(_person("bob"), actor="op", now=NOW)
    async with store.read() as tx:
        assert await tx.people.get_rotation("r") is None
        assert await tx.people.get_recipient("bob") is None


async def test_an_open_obligation_naming_a_person_is_owed(store: SqlStore) -> None:
    targets = document((), effective=effective((), targets=(Target(recipient_id="ann"),)))
    owed, _settled = await insert(
        store,
        row(notification=targets),
        row(notification=targets, status=Status.DELIVERED.value),
    )
    async with store.write() as tx:
        assert list(await tx.people.owing_notifications("ann")) == [owed]
        assert list(await tx.people.owing_notifications("bob")) == []


async def test_notifications_list_newest_first_by_key_and_filter(store: SqlStore) -> None:
    old, new, failed = await insert(
        store,
        row(created_at=NOW - timedelta(minutes=3)),
        row(created_at=NOW - timedelta(minutes=1)),
        row(created_at=NOW - timedelta(minutes=2), status=Status.FAILED.value),
    )
    async with store.read() as tx:
        page = await tx.notifications.list_page(conditions=(), after=None, limit=2)
        assert [n.id for n in page] == [new, failed]
        last = page[-1]
        rest = await tx.notifications.list_page(
            conditions=(), after=(last.created_at, last.id), limit=10
        )
        assert [n.id for n in rest] == [old]
        only = await tx.notifications.list_page(
            conditions=[("state", Status.FAILED.value)], after=None, limit=10
        )
        assert [n.id for n in only] == [failed]
        held = await tx.notifications.get(old)
        assert held is not None
        by_key = await tx.notifications.by_key(held.key)
        assert by_key is not None and by_key.id == old
        assert await tx.notifications.by_key("absent") is None


async def test_the_event_tail_reads_what_committed(store: SqlStore) -> None:
    tail = store.event_tail()
    try:
        assert await tail.high_water() == 0
        async with store.write() as tx:
            await tx.events.append([_event("n", EventKind.ACCEPTED, {"i": i}) for i in (1, 2)], NOW)
        assert await tail.high_water() == 2
        assert [e.payload["i"] for e in await tail.read_after(0, limit=10)] == [1, 2]
        assert [e.sequence for e in await tail.read_after(1, limit=10)] == [2]
    finally:
        await tail.close()


async def test_maintenance_windows_are_kept_audited_and_hold_claimed_rows(
    store: SqlStore,
) -> None:
    window = MaintenanceWindow(
        "db-upgrade", NOW - timedelta(hours=1), NOW + timedelta(hours=1), ("db.*",), "upgrade"
    )
    ended = MaintenanceWindow("old", NOW - timedelta(hours=3), NOW - timedelta(hours=2), ("*",))
    async with store.write() as tx:
        stored = await tx.maintenance.put(window, actor="oscar", now=NOW)
        await tx.maintenance.put(ended, actor="oscar", now=NOW)
    assert (stored.updated_by, stored.updated_at, stored.notification_types) == (
        "oscar",
        NOW,
        ("db.*",),
    )
    async with store.read() as tx:
        assert await tx.maintenance.get("db-upgrade") == stored
        assert [w.window_id for w in await tx.maintenance.list_windows(after=None, limit=5)] == [
            "db-upgrade",
            "old",
        ]
        assert [w.window_id for w in await tx.maintenance.list_windows(after="db", limit=1)] == [
            "db-upgrade"
        ]
        assert [w.window_id for w in await tx.maintenance.not_ended(NOW, limit=5)] == ["db-upgrade"]
    # The claim's hold: fenced by the lease token, the attempt given back.
    [nid, other] = await insert(store, row(), row())
    [lease, lease2] = await claim(store, limit=2)
    hold = ClaimHold(nid, lease.lease_token, "db-upgrade", window.end_time, 0, 0)
    stale = ClaimHold(other, "not-the-token", "db-upgrade", window.end_time, 0, 0)
    if lease.notification.id != nid:
        hold = ClaimHold(nid, lease2.lease_token, "db-upgrade", window.end_time, 0, 0)
    async with store.write() as tx:
        assert await tx.maintenance.hold([hold, stale], NOW) == {nid}
    held = await fetch(store, nid)
    assert (held["lease_token"], held["attempts"], held["next_attempt"]) == (
        None,
        0,
        window.end_time,
    )
    assert (held["held_until"], held["held_by_window_id"]) == (window.end_time, "db-upgrade")
    # Retimed while the window stays, released when it goes.
    later = window.end_time + timedelta(hours=1)
    async with store.write() as tx:
        assert await tx.maintenance.retime_held("db-upgrade", until=later, now=NOW) == 1
    assert (await fetch(store, nid))["next_attempt"] == later
    async with store.write() as tx:
        gone = await tx.maintenance.delete("db-upgrade", actor="oscar", now=NOW)
        assert gone is not None and await tx.maintenance.delete("nope", actor="o", now=NOW) is None
        assert await tx.maintenance.retime_held("db-upgrade", until=None, now=NOW) == 1
    released = await fetch(store, nid)
    assert (released["next_attempt"], released["held_until"], released["held_by_window_id"]) == (
        NOW,
        None,
        None,
    )
    async with store.read() as tx:
        changes = await tx.maintenance.changes(limit=10)
    assert sorted((c.window_id, c.action, c.actor) for c in changes) == [
        ("db-upgrade", "DELETE", "oscar"),
        ("db-upgrade", "PUT", "oscar"),
        ("old", "PUT", "oscar"),
    ]


async def test_a_window_retimes_the_rows_it_holds_that_no_lease_holds(store: SqlStore) -> None:
    # Held by "w" while in flight: the running job's lease (the row's own columns
    # cleared), or a previous release's on the row (its job not running).
    held = {"held_by_window_id": "w", "held_until": NOW + MINUTE}
    by_job = (await leased_by_its_job(store, **held)).notification.id
    by_row, free = await insert(
        store, row(next_attempt=NOW + MINUTE, **held), row(next_attempt=NOW + MINUTE, **held)
    )
    await leased_by_its_row(store, by_row)
    later = NOW + timedelta(hours=1)
    async with store.write() as tx:
        assert await tx.maintenance.retime_held("w", until=later, now=NOW) == 3
    retimed = {nid: (await fetch(store, nid))["next_attempt"] for nid in (by_job, by_row, free)}
    assert retimed == {by_job: NOW - SECOND, by_row: NOW + MINUTE, free: later}


async def test_a_window_retimes_a_row_whose_settle_it_waited_for(
    db_url: str, store: SqlStore
) -> None:
    # The retry's settle commits while the retime waits on the row's lock: the retime
    # sees the lease it released, and retimes the row.
    [nid] = await insert(store, row(held_by_window_id="w", held_until=NOW + MINUTE))
    later = NOW + timedelta(hours=1)

    async def retime() -> int:
        async with store.write() as tx:
            return await tx.maintenance.retime_held("w", until=later, now=NOW)

    assert await retried_while_waiting(db_url, store, nid, NOW, retime) == 1
    assert (await fetch(store, nid))["next_attempt"] == later
