"""Record builders (``store.records``): one record per row, the same whichever driver
read it. The hot statements read asyncpg ``Record``s (``store.pg``), everything else
SQLAlchemy ``RowMapping``s; a record must not depend on which. A new notification goes
the other way (``notification_row``): whichever way the port inserts it, it reads back
as the record it was, its JSON as every version wrote it."""

from __future__ import annotations

import dataclasses
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import bindparam, insert, select

from tests.support.documents import document
from uns_server.domain.enums import AckStatus, DeliveryMode, EventKind, Status
from uns_server.domain.outcomes import DeliveryOutcome, provider_refs_json
from uns_server.domain.records import Event, Notification
from uns_server.domain.schedule import StepKind, StepProgress
from uns_server.store import pg, records
from uns_server.store.db import Database
from uns_server.store.events import SqlEvents
from uns_server.store.notifications import SqlNotificationReads
from uns_server.store.port import NewEvent
from uns_server.store.sql_store import SqlStore
from uns_server.store.tables import events as events_table
from uns_server.store.tables import notifications as notifications_table

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _row(**overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = {column.name: None for column in notifications_table.c}
    values |= {
        "id": str(uuid.uuid4()),
        "key": uuid.uuid4().hex * 2,
        "fingerprint": "f" * 64,
        "principal": "alice",
        "notification_type": "records",
        "source": "tests",
        "notification": document(["hook"]),
        "status": Status.DELIVERED.value,
        "priority": 3,
        "delivery_mode": DeliveryMode.GUARANTEED.value,
        "require_ack": True,
        "max_attempts": 4,
        "outcome": DeliveryOutcome(("hook",), ("hook",)).to_json(),
        "attempts": 1,
        "cycle": 1,
        "cycle_attempts": 1,
        "next_attempt": NOW,
        "provider_effect_may_have_occurred": False,
        "dead_letter": False,
        "delivered_at": NOW,
        "deadline": NOW + timedelta(hours=1),
        "ack_status": AckStatus.PENDING.value,
        "provider_refs": {"hook": {"type": "webhook", "at": NOW.isoformat()}},
        "created_at": NOW - timedelta(seconds=5),
        "updated_at": NOW,
        "followup_step": StepProgress(StepKind.REMINDER, 1, NOW, 2, {}, True).to_json(),
        "reminders_sent": 1,
        "escalations_sent": 0,
        "snoozed_seconds": 0,
        "snoozes_ended": 0,
    }
    return values | overrides


async def test_a_notification_record_is_the_row_with_its_enums_typed(db: Database) -> None:
    stored = _row()
    async with db.write() as tx:
        await tx.conn.execute(insert(notifications_table), [stored])
    async with db.read() as conn:
        found = await SqlNotificationReads(conn).get(stored["id"])
    assert found is not None
    columns = {f.name: getattr(found, f.name) for f in dataclasses.fields(found)}
    assert found.followup_step is not None
    typed = {
        "notification": found.notification.to_json(),
        "outcome": found.outcome.to_json(),
        "followup_step": found.followup_step.to_json(),
        "provider_refs": provider_refs_json(found.provider_refs),
    }
    assert columns | typed == stored
    assert (type(found.status), type(found.delivery_mode), type(found.ack_status)) == (
        Status,
        DeliveryMode,
        AckStatus,
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        found.status = Status.FAILED  # type: ignore[misc]


async def test_asyncpg_and_sqlalchemy_rows_build_the_same_records(db: Database) -> None:
    if not db.is_postgres:
        pytest.skip("the asyncpg fast path is PostgreSQL's")
    stored = _row()
    async with db.write() as tx:
        await tx.conn.execute(insert(notifications_table), [stored])
        await SqlEvents(tx).append(
            [NewEvent(stored["id"], "alice", "records", EventKind.ACCEPTED, {"n": 1})],
            NOW,
        )
    the_row = select(notifications_table).where(notifications_table.c.id == bindparam("id"))
    its_events = select(events_table).where(events_table.c.notification_id == bindparam("id"))
    params = {"id": stored["id"]}
    async with db.read() as conn:
        driver = pg.driver(conn)
        [fast] = await pg.Statement(the_row).fetch(driver, params)
        [fast_event] = await pg.Statement(its_events).fetch(driver, params)
        mapping = (await conn.execute(the_row, params)).mappings().one()
        event_mapping = (await conn.execute(its_events, params)).mappings().one()
    assert records.notification(fast) == records.notification(mapping)
    assert isinstance(records.notification(fast), Notification)
    event = records.event(fast_event)
    assert event == records.event(event_mapping)
    assert isinstance(event, Event) and event.kind is EventKind.ACCEPTED
    assert event.payload == {"n": 1} and event.at == NOW


async def test_a_claim_hands_the_row_as_it_was_with_its_new_token() -> None:
    # Pure: the Attempt built from a claimed row (as before the claim) and a token.
    fresh = records.attempt(_row(lease_token=None, attempts=0, cycle_attempts=0), "t1", None)
    assert (fresh.lease_token, fresh.recovered, fresh.attempt, fresh.cycle_attempt) == (
        "t1",
        False,
        1,
        1,
    )
    # The delivery job still held an interrupted attempt's token: that attempt, which no
    # settle counted, is counted (the claim writes the same), and its effect flagged.
    interrupted = _row(lease_token=None, attempts=2, cycle_attempts=1)
    recovered = records.attempt(interrupted, "t2", "old")
    assert (recovered.recovered, recovered.attempt, recovered.cycle_attempt) == (True, 4, 3)
    assert recovered.notification.lease_token == "old"
    assert recovered.notification.provider_effect_may_have_occurred
    # A previous release's replica leased the row itself: its claim counted the attempt.
    theirs = records.attempt(_row(lease_token="old", attempts=2, cycle_attempts=1), "t3", None)
    assert (theirs.recovered, theirs.attempt, theirs.cycle_attempt) == (True, 3, 2)
    assert theirs.notification.lease_token == "old"


def _sparse(**overrides: Any) -> dict[str, Any]:
    """A row as intake writes one: every column its value can leave unset is NULL."""
    return _row(
        status=Status.PENDING.value,
        outcome=DeliveryOutcome().to_json(),
        attempts=0,
        cycle_attempts=0,
        delivered_at=None,
        deadline=None,
        ack_status=None,
        provider_refs=None,
        followup_step=None,
        reminders_sent=0,
        **overrides,
    )


def _full(**overrides: Any) -> dict[str, Any]:
    """A row with every column set but the delivery lease (a new row's is its job's)."""
    later = NOW + timedelta(minutes=1)
    return _row(
        dedup_key="d" * 64,
        dedup_owner_id=str(uuid.uuid4()),
        dedup_generation=2,
        dedup_successor_id=str(uuid.uuid4()),
        lease_until=None,
        lease_token=None,
        provider_effect_may_have_occurred=True,
        dead_letter=True,
        actor="bob",
        responded_at=NOW,
        response_metadata={"note": "seen", "n": [1, 2]},
        withdrawn_at=NOW,
        withdrawn_by="carol",
        withdraw_reason="done",
        followup_at=later,
        followup_lease_token="f",
        followup_lease_until=later,
        **overrides,
    )


def test_a_record_is_written_back_as_the_row_it_was_read_from() -> None:
    # The inverse of the reader, JSON key order included: what goes on disk is the
    # shape every version wrote (SQLite keeps the text as written).
    for values in (_sparse(), _full()):
        written = records.notification_row(records.notification(values))
        assert written.keys() == values.keys()  # every column, none added
        assert _as_text(written) == _as_text(values)


def _as_text(row: dict[str, Any]) -> dict[str, str]:
    return {column: json.dumps(value, default=str) for column, value in row.items()}


async def _insert(store: SqlStore, way: str, new: Notification) -> None:
    if way == "insert":
        async with store.write() as tx:
            await tx.notifications.insert([new])
    elif way == "before_events":
        async with store.write() as tx:
            await tx.notifications.insert_before_events([new])
            await tx.events.append([_accepted(new)], NOW)
    else:
        async with store.one_statement() as tx:
            tx.notifications.insert_new_before_events([new], {new.notification_type: None})
            await tx.events.append([_accepted(new)], NOW)


def _accepted(n: Notification) -> NewEvent:
    return NewEvent(n.id, n.principal, n.notification_type, EventKind.ACCEPTED, {})


@pytest.mark.parametrize("way", ["insert", "before_events", "new_before_events"])
async def test_a_notification_inserted_through_the_port_reads_back_equal(
    store: SqlStore, way: str
) -> None:
    if way == "new_before_events" and not store.writes_in_one_statement:
        pytest.skip("one-statement writes are PostgreSQL's")
    new = [records.notification(values) for values in (_sparse(), _full())]
    for n in new:
        await _insert(store, way, n)
    async with store.read() as tx:
        assert [await tx.notifications.get(n.id) for n in new] == new


def test_a_leased_copy_changes_only_its_lease() -> None:
    accepted = records.notification(_sparse())
    leased = accepted.leased("t1", NOW)
    assert leased == dataclasses.replace(accepted, lease_token="t1", lease_until=NOW)
    assert accepted.lease_token is None  # a copy
