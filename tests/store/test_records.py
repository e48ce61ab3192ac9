"""Record builders (``store.records``): one record per row, the same whichever driver
read it. The hot statements read asyncpg ``Record``s (``store.pg``), everything else
SQLAlchemy ``RowMapping``s; a record must not depend on which."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import bindparam, select

from tests.support.documents import document
from uns_server.domain.enums import AckStatus, DeliveryMode, EventKind, Status
from uns_server.domain.outcomes import DeliveryOutcome, provider_refs_json
from uns_server.domain.records import Event, Notification
from uns_server.domain.schedule import StepKind, StepProgress
from uns_server.store import events, notifications, pg, records
from uns_server.store.db import Database
from uns_server.store.port import NewEvent
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
    }
    return values | overrides


async def test_a_notification_record_is_the_row_with_its_enums_typed(db: Database) -> None:
    stored = _row()
    async with db.write() as tx:
        await notifications.insert_notifications(tx.conn, [stored])
    async with db.read() as conn:
        found = await notifications.get(conn, stored["id"])
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
        await notifications.insert_notifications(tx.conn, [stored])
        await events.append(
            tx,
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
    fresh = records.attempt(_row(lease_token=None, attempts=0, cycle_attempts=0), "t1")
    assert (fresh.lease_token, fresh.recovered, fresh.attempt, fresh.cycle_attempt) == (
        "t1",
        False,
        1,
        1,
    )
    recovered = records.attempt(_row(lease_token="old", attempts=2, cycle_attempts=1), "t2")
    assert (recovered.recovered, recovered.attempt, recovered.cycle_attempt) == (True, 3, 2)
    assert recovered.notification.lease_token == "old"
