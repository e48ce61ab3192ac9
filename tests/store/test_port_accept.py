"""The store port's conformance suite, continued (``uns_server.store.port``), on SQLite
and PostgreSQL (``db_url``): the accept written as one statement
(``Store.one_statement``, ``Notifications.insert_new_before_events``), and an answer
to messages sent while a person's quiet hours held theirs (``Acks.settle_pending``'s
``sent_while_held``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tests.store.test_conformance import NOW, _event, fetch, insert, record, row
from uns_server.domain.enums import AckStatus, DeliveryMode, EventKind, Status
from uns_server.domain.policy import PolicyRevision, PolicySpec
from uns_server.store.port import FenceMoved
from uns_server.store.sql_store import SqlStore

KIND = "conformance"


async def _policy(store: SqlStore, channels: list[str]) -> PolicyRevision:
    spec = PolicySpec.build(channels, DeliveryMode.GUARANTEED, False)
    async with store.write() as tx:
        put = await tx.policies.put_revision(KIND, spec, actor="op", now=NOW)
        active = await tx.policies.activate(KIND, put.revision, now=NOW)
    assert active is not None
    return active


async def _accept_in_one(
    store: SqlStore, new: dict[str, Any], under: PolicyRevision | None
) -> None:
    async with store.one_statement() as tx:
        tx.notifications.insert_new_before_events([record(new)], {KIND: under})
        await tx.events.append([_event(new["id"], EventKind.ACCEPTED, {})], NOW)


async def _events_of(store: SqlStore, nid: str) -> list[str]:
    async with store.read() as tx:
        return [
            e.notification_id
            for e in await tx.events.read_after(0, limit=100)
            if e.notification_id == nid
        ]


async def test_one_statement_writes_new_rows_only_while_keys_are_free_and_policies_hold(
    store: SqlStore,
) -> None:
    if not store.writes_in_one_statement:  # SQLite keeps its transactions
        with pytest.raises(RuntimeError):
            async with store.one_statement():
                pass
        return
    none = row()
    await _accept_in_one(store, none, None)  # no policy for the type, as admitted
    assert (await fetch(store, none["id"]))["key"] == none["key"]
    assert await _events_of(store, none["id"]) == [none["id"]]

    held = row(key=none["key"])  # the key is held: nothing of the statement is written
    with pytest.raises(FenceMoved):
        await _accept_in_one(store, held, None)
    async with store.read() as tx:
        assert await tx.notifications.get(held["id"]) is None
    assert await _events_of(store, held["id"]) == []

    first = await _policy(store, ["webhook"])
    stale = row()  # admitted as if the type had no policy: one has been activated
    with pytest.raises(FenceMoved):
        await _accept_in_one(store, stale, None)
    fresh = row()
    await _accept_in_one(store, fresh, first)
    assert await _events_of(store, fresh["id"]) == [fresh["id"]]

    await _policy(store, ["log"])  # a new revision is ACTIVE: the remembered one fails
    moved = row()
    with pytest.raises(FenceMoved):
        await _accept_in_one(store, moved, first)
    async with store.read() as tx:
        assert await tx.notifications.get(moved["id"]) is None


async def test_an_answer_to_messages_sent_while_held_settles_the_unset_ack(
    store: SqlStore,
) -> None:
    """A PENDING delivery whose people's messages are held (no lease, no ack yet) takes
    an answer only when the caller says its messages went out while held."""
    held = {"held": [{"recipient_id": "r1", "held_until": (NOW + timedelta(hours=1)).isoformat()}]}
    [nid] = await insert(
        store,
        row(require_ack=True, outcome={**held, "channels_succeeded": ["webhook"]}),
    )

    async def settle(sent_while_held: bool) -> bool:
        async with store.write() as tx:
            return await tx.acks.settle_pending(
                nid,
                status=AckStatus.ACKED,
                actor="bob",
                metadata=None,
                now=NOW,
                sent_while_held=sent_while_held,
            )

    assert await settle(False) is False  # not in flight: nothing to answer yet
    assert (await fetch(store, nid))["ack_status"] is None
    assert await settle(True) is True
    settled = await fetch(store, nid)
    assert (settled["ack_status"], settled["actor"], settled["status"]) == (
        "ACKED",
        "bob",
        Status.PENDING,
    )
    assert await settle(True) is False  # settled once
