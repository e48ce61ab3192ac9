"""The notification document (``domain.documents``), the delivery outcome and the
provider references (``domain.outcomes``) through the store: a row reads back as the
typed records it was written from, on SQLite and on PostgreSQL, the JSON on disk keeps
the shape every version wrote, and what earlier versions wrote (without the keys added
since) still reads."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime, time, timedelta
from typing import Any

from sqlalchemy import insert, select

from tests.store.test_conformance import row
from tests.support.documents import accepted
from uns_server.domain.documents import NotificationDocument
from uns_server.domain.enums import AutonomyMode, DeliveryMode, Intent, Priority
from uns_server.domain.outcomes import (
    DeliveryOutcome,
    Held,
    Unreachable,
    provider_refs_from_json,
    provider_refs_json,
)
from uns_server.domain.policy import EffectivePolicy, PolicySpec
from uns_server.domain.requests import AutonomyContext
from uns_server.domain.schedule import EscalationStep, QuietHours, Reminder
from uns_server.domain.targets import Target
from uns_server.store import records
from uns_server.store.db import Database
from uns_server.store.notifications import SqlNotificationReads, SqlNotifications
from uns_server.store.tables import notifications as notifications_table

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _everything() -> NotificationDocument:
    """A document with every optional part set: what a send under a policy with
    quiet hours, a reminder, escalation steps and targets writes."""
    spec = PolicySpec(
        channels=("webhook", "slack"),
        delivery_mode=DeliveryMode.GUARANTEED,
        require_ack=True,
        ack_timeout_minutes=30,
        priority=Priority.HIGH,
        dedup_window_seconds=120,
        max_attempts=7,
        quiet_hours=QuietHours("Europe/Paris", time(22, 0), time(7, 0)),
        reminder=Reminder(timedelta(minutes=5), 2.0, 3),
        escalation=(EscalationStep(timedelta(minutes=10), ("email",), (Target("r-2"),)),),
        targets=(Target("r-1"), Target(rotation_id="rot-1")),
        escalation_loops=2,
    )
    effective = EffectivePolicy.of(spec, policy_id="p-1", policy_revision=3, policy_hash="h" * 64)
    return accepted(
        ("webhook", "slack"),
        intent=Intent.SAFETY,
        title="Door open",
        message="The lab door is open",
        idempotency_key="idem-1",
        dedup_key="door",
        correlation_id="corr-1",
        autonomy_context=AutonomyContext(AutonomyMode.SUPERVISED, "agent-7"),
        metadata={"room": "B12", "floors": [1, 2], "nested": {"ok": True}},
        effective=effective,
        schedule_time=NOW + timedelta(hours=1),
        trace_context={"traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01"},
    )


async def _insert(db: Database, values: dict[str, Any], **typed: Any) -> None:
    """The row of ``values`` through the store's writer, as intake hands it a record
    (``typed``: fields of that record), or, with no ``typed``, ``values`` as given
    (what earlier versions wrote)."""
    async with db.write() as tx:
        if typed:
            new = dataclasses.replace(records.notification(values), **typed)
            await SqlNotifications(tx).insert([new])
        else:
            await tx.conn.execute(insert(notifications_table), [values])


async def _write_and_read(
    db: Database,
    stored: NotificationDocument | DeliveryOutcome | dict[str, Any],
    column: str = "notification",
) -> tuple[Any, Any]:
    """(the record read back, ``column``'s JSON as the database holds it): ``stored`` is
    a typed value written through the store, or JSON as earlier versions wrote it."""
    if isinstance(stored, dict):
        values = row(**{column: stored})
        await _insert(db, values)
    else:
        values = row()
        await _insert(db, values, **{column: stored})
    raw = select(notifications_table.c[column]).where(notifications_table.c.id == values["id"])
    async with db.read() as conn:
        found = await SqlNotificationReads(conn).get(values["id"])
        on_disk = (await conn.execute(raw)).scalar_one()
    assert found is not None
    return found, on_disk


async def test_a_stored_document_reads_back_as_the_typed_document(db: Database) -> None:
    written = _everything()
    found, on_disk = await _write_and_read(db, written)
    assert found.notification == written
    assert found.notification.effective.targets == (Target("r-1"), Target(rotation_id="rot-1"))
    assert found.notification.schedule_time == NOW + timedelta(hours=1)
    # The JSON on disk is the shape intake has always written: no new keys, none renamed.
    assert set(on_disk) == {
        "notification_type", "intent", "title", "message", "source", "idempotency_key",
        "dedup_key", "correlation_id", "autonomy_context", "metadata", "effective",
        "schedule_time", "trace_context",
    }  # fmt: skip
    assert on_disk["intent"] == "SAFETY"
    assert on_disk["autonomy_context"] == {"autonomy_mode": "SUPERVISED", "agent_id": "agent-7"}
    assert on_disk["effective"] == written.effective.to_json()
    assert on_disk["schedule_time"] == "2026-03-01T13:00:00+00:00"


async def test_a_minimal_document_writes_no_optional_keys(db: Database) -> None:
    written = accepted(("log",))
    found, on_disk = await _write_and_read(db, written)
    assert found.notification == written
    assert "schedule_time" not in on_disk and "trace_context" not in on_disk
    assert on_disk["intent"] is None and on_disk["autonomy_context"] is None
    assert set(on_disk["effective"]) == {
        "channels", "delivery_mode", "require_ack", "ack_timeout_minutes", "priority",
        "dedup_window_seconds", "max_attempts", "policy_id", "policy_revision",
        "policy_hash", "effective_hash",
    }  # fmt: skip


async def test_a_document_written_by_an_earlier_version_still_reads(db: Database) -> None:
    # The first versions wrote no schedule_time or trace_context, and an effective
    # policy without the time blocks or targets; some keys were null rather than "".
    old = {
        "notification_type": "backup",
        "intent": "WARNING",
        "title": "Backup late",
        "message": "Nightly backup has not finished",
        "source": "cron",
        "idempotency_key": None,
        "dedup_key": None,
        "correlation_id": None,
        "autonomy_context": {"autonomy_mode": None, "agent_id": None},
        "metadata": None,
        "effective": {
            "channels": ["log"],
            "delivery_mode": "BEST_EFFORT",
            "require_ack": False,
            "ack_timeout_minutes": 60,
            "priority": "NORMAL",
            "dedup_window_seconds": 300,
            "max_attempts": 5,
            "policy_id": None,
            "policy_revision": 0,
            "policy_hash": None,
            "effective_hash": uuid.uuid4().hex,
        },
    }
    found, on_disk = await _write_and_read(db, old)
    assert on_disk == old  # reading changes nothing stored
    doc = found.notification
    assert (doc.title, doc.message, doc.intent) == ("Backup late", old["message"], Intent.WARNING)
    assert (doc.idempotency_key, doc.dedup_key, doc.correlation_id) == ("", "", "")
    assert doc.autonomy_context == AutonomyContext(None, "")
    assert doc.metadata == {} and doc.schedule_time is None and doc.trace_context is None
    e = doc.effective
    assert (e.channels, e.delivery_mode, e.priority, e.max_attempts) == (
        ("log",),
        DeliveryMode.BEST_EFFORT,
        Priority.NORMAL,
        5,
    )
    assert (e.quiet_hours, e.reminder, e.escalation, e.targets, e.escalation_loops) == (
        None,
        None,
        (),
        (),
        0,
    )
    assert e.effective_hash == old["effective"]["effective_hash"]  # kept as frozen


async def test_rows_sharing_a_hash_but_not_a_policy_read_their_own(db: Database) -> None:
    # Rows sharing a policy share its parse; a row whose stored policy differs (even
    # under the same hash) must still read its own.
    first, second = accepted(("webhook",)), accepted(("webhook",))
    changed = second.to_json()
    changed["effective"] = changed["effective"] | {"channels": ["email"]}
    a, _ = await _write_and_read(db, first.to_json())
    b, _ = await _write_and_read(db, changed)
    assert a.notification.effective.channels == ("webhook",)
    assert b.notification.effective.channels == ("email",)
    assert a.notification.effective.effective_hash == b.notification.effective.effective_hash


async def _outcome_read(db: Database, stored: DeliveryOutcome | dict[str, Any]) -> tuple[Any, Any]:
    found, on_disk = await _write_and_read(db, stored, "outcome")
    return found.outcome, on_disk


async def test_an_outcome_reads_back_typed_with_the_people_it_could_not_ask(db: Database) -> None:
    written = DeliveryOutcome(
        channels_attempted=("hook", "mail@alice"),
        channels_succeeded=("mail@alice",),
        channels_failed=("hook",),
        error_message="hook: HTTP 503",
        recipients_unreachable=(Unreachable("carol", "no contact"),),
    )
    found, on_disk = await _outcome_read(db, written)
    assert found == written
    assert on_disk == {
        "channels_attempted": ["hook", "mail@alice"],
        "channels_succeeded": ["mail@alice"],
        "channels_failed": ["hook"],
        "error_message": "hook: HTTP 503",
        "recipients_unreachable": [{"recipient_id": "carol", "reason": "no contact"}],
    }


async def test_an_outcome_reads_back_the_people_whose_quiet_hours_hold_them(db: Database) -> None:
    # As the settlement writes it (``held_json``); a withdrawal writes it back unchanged.
    stored = {
        "channels_attempted": ["mail@bob"],
        "channels_succeeded": ["mail@bob"],
        "channels_failed": [],
        "error_message": None,
        "held": [
            {"channel": "mail", "route": "mail@alice", "recipient_id": "alice",
             "held_until": NOW.isoformat()},
        ],
    }  # fmt: skip
    found, on_disk = await _outcome_read(db, stored)
    assert on_disk == stored
    assert found.held == (Held("alice", "mail", "mail@alice", NOW),)
    assert found.to_json() == stored


async def test_outcomes_without_the_later_keys_still_read(db: Database) -> None:
    found, _ = await _outcome_read(db, {})
    assert found == DeliveryOutcome()
    old = {"channels_attempted": ["log"], "channels_succeeded": [], "channels_failed": ["log"]}
    found, on_disk = await _outcome_read(db, old)
    assert on_disk == old
    assert (found.channels_failed, found.error_message, found.recipients_unreachable) == (
        ("log",),
        None,
        (),
    )


async def test_provider_references_read_back_typed_with_the_entry_as_stored(db: Database) -> None:
    at = NOW.isoformat()
    refs = {
        # The delivery's Slack message: the provider's own fields spread into the entry.
        "chat": {"type": "slack", "slack_channel": "C1", "slack_ts": "171.2", "channel": "chat",
                 "message_id": "171.2", "attempt": 1, "cycle": 1, "at": at},
        # A person's PagerDuty incident for a reminder.
        "pd@alice:reminder:2": {"type": "pagerduty", "pagerduty_dedup_key": "k-9",
                                "channel": "pd", "message_id": "", "attempt": 2, "cycle": 1,
                                "at": at, "follow_up": "REMINDER", "follow_up_number": 2,
                                "recipient_id": "alice", "due_time": at},
        # As an early version wrote it: no attempt, cycle or time.
        "hook": {"type": "webhook", "channel": "hook"},
    }  # fmt: skip
    values = row(provider_refs=refs)
    await _insert(db, values, provider_refs=provider_refs_from_json(refs))
    async with db.read() as conn:
        found = await SqlNotificationReads(conn).get(values["id"])
    assert found is not None and found.provider_refs is not None
    assert provider_refs_json(found.provider_refs) == refs  # passed on to channels as is
    chat, page, hook = (found.provider_refs[k] for k in refs)
    assert (chat.channel_type, chat.slack_channel, chat.slack_ts, chat.at) == (
        "slack",
        "C1",
        "171.2",
        NOW,
    )
    assert (page.recipient_id, page.follow_up, page.follow_up_number, page.due_time) == (
        "alice",
        "REMINDER",
        2,
        NOW,
    )
    assert page.provider_field("pagerduty_dedup_key") == "k-9"
    assert (hook.attempt, hook.cycle, hook.at, hook.message_id, hook.due_time) == (
        0,
        0,
        None,
        "",
        None,
    )
