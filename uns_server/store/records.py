"""Rows to records (``domain.records``): one builder per table.

A builder reads by column name, so it takes a SQLAlchemy ``RowMapping`` and an
asyncpg ``Record`` alike (and a row with extra columns, such as the claim's
``claimed_token``). It runs on the hot path (every claim and accept reads rows), so
each reads a precomputed column list in one ``itemgetter`` call, positionally into the
dataclass, and maps enum values through a dict: no per-row reflection, no
``Enum.__call__``. (Most of what is left is the frozen dataclass's own ``__init__``.)
The notification document, the outcome, the provider references and a follow-up
step's progress are parsed here, once per row read (``NotificationDocument.from_json``,
rows sharing a policy share its parse; ``DeliveryOutcome.from_json``;
``provider_refs_from_json``; ``StepProgress.from_json``).

A new notification goes the other way once (``notification_row``): intake builds its
record, the store writes it as the row ``notification`` reads back, the typed columns
as their ``to_json`` (the shape every version wrote) and the enums as their values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields, replace
from operator import itemgetter
from typing import Any

from uns_server.domain.documents import NotificationDocument
from uns_server.domain.enums import AckStatus, DeliveryMode, EventKind, Role, Status
from uns_server.domain.jobs import JobKind, JobState
from uns_server.domain.outcomes import (
    DeliveryOutcome,
    provider_refs_from_json,
    provider_refs_json,
)
from uns_server.domain.policy import PolicyRevision, PolicySpec
from uns_server.domain.records import (
    AckAuditRecord,
    ApiKey,
    Attempt,
    ConsoleSession,
    DedupWindow,
    DeliveryAuditRecord,
    Event,
    FailedSummary,
    Job,
    Notification,
    PolicyType,
    RecentEvent,
    RetentionCandidate,
)
from uns_server.domain.schedule import StepProgress
from uns_server.store import tables

# A row read by column name: ``RowMapping`` (keyed by name or column) or ``Record``.
Row = Mapping[Any, Any]

_STATUS: dict[str, Status] = {s.value: s for s in Status}
_ACK: dict[str | None, AckStatus | None] = {None: None} | {a.value: a for a in AckStatus}
_MODE: dict[str, DeliveryMode] = {m.value: m for m in DeliveryMode}
_KIND: dict[str, EventKind] = {k.value: k for k in EventKind}
_ROLE: dict[str, Role] = {r.value: r for r in Role}


def _columns(record: type, table: Any) -> Callable[[Row], tuple[Any, ...]]:
    """A getter of the record's fields, in order, from a row; each must be a column of
    ``table`` (checked once, at import, so a schema change that drops one fails loudly)."""
    names = tuple(f.name for f in fields(record))
    missing = [name for name in names if name not in table.c]
    assert not missing, f"{record.__name__}: no column {missing} in {table.name}"
    return itemgetter(*names)


def _index(record: type, name: str) -> int:
    return [f.name for f in fields(record)].index(name)


_NOTIFICATION = _columns(Notification, tables.notifications)
_N_STATUS = _index(Notification, "status")
_N_MODE = _index(Notification, "delivery_mode")
_N_ACK = _index(Notification, "ack_status")
_N_DOCUMENT = _index(Notification, "notification")
_N_OUTCOME = _index(Notification, "outcome")
_N_STEP = _index(Notification, "followup_step")
_N_REFS = _index(Notification, "provider_refs")
_EVENT = _columns(Event, tables.events)
_E_KIND = _index(Event, "kind")
_DEDUP = _columns(DedupWindow, tables.dedup)
_DELIVERY_AUDIT = _columns(DeliveryAuditRecord, tables.notification_audit_records)
_DA_STATUS = _index(DeliveryAuditRecord, "status")
_DA_MODE = _index(DeliveryAuditRecord, "delivery_mode")
_ACK_AUDIT = _columns(AckAuditRecord, tables.ack_audit_records)
_AA_OLD = _index(AckAuditRecord, "old_status")
_AA_NEW = _index(AckAuditRecord, "new_status")
_JOB = _columns(Job, tables.jobs)
_J_KIND = _index(Job, "kind")
_J_STATE = _index(Job, "state")
_JOB_KIND: dict[str, JobKind] = {k.value: k for k in JobKind}
_JOB_STATE: dict[str, JobState] = {s.value: s for s in JobState}
_CONSOLE_SESSION = _columns(ConsoleSession, tables.console_sessions)


def notification(row: Row) -> Notification:
    values = list(_NOTIFICATION(row))
    values[_N_STATUS] = _STATUS[values[_N_STATUS]]
    values[_N_MODE] = _MODE[values[_N_MODE]]
    values[_N_ACK] = _ACK[values[_N_ACK]]
    values[_N_DOCUMENT] = NotificationDocument.from_json(values[_N_DOCUMENT])
    values[_N_OUTCOME] = DeliveryOutcome.from_json(values[_N_OUTCOME])
    if values[_N_REFS] is not None:  # none until a provider takes a message
        values[_N_REFS] = provider_refs_from_json(values[_N_REFS])
    if values[_N_STEP] is not None:  # a follow-up step between its calls (rare)
        values[_N_STEP] = StepProgress.from_json(values[_N_STEP])
    return Notification(*values)


def notification_row(n: Notification) -> dict[str, Any]:
    """The ``uns_notifications`` row of a record (inverse of ``notification``), spelled
    out column by column: it runs once per inserted row, on the hot path."""
    ack, refs, step = n.ack_status, n.provider_refs, n.followup_step
    return {
        "id": n.id,
        "key": n.key,
        "fingerprint": n.fingerprint,
        "principal": n.principal,
        "notification_type": n.notification_type,
        "source": n.source,
        "notification": n.notification.to_json(),
        "status": n.status.value,
        "priority": n.priority,
        "delivery_mode": n.delivery_mode.value,
        "require_ack": n.require_ack,
        "max_attempts": n.max_attempts,
        "outcome": n.outcome.to_json(),
        "attempts": n.attempts,
        "cycle": n.cycle,
        "cycle_attempts": n.cycle_attempts,
        "dedup_key": n.dedup_key,
        "dedup_owner_id": n.dedup_owner_id,
        "dedup_generation": n.dedup_generation,
        "dedup_successor_id": n.dedup_successor_id,
        "next_attempt": n.next_attempt,
        "lease_until": n.lease_until,
        "lease_token": n.lease_token,
        "provider_effect_may_have_occurred": n.provider_effect_may_have_occurred,
        "dead_letter": n.dead_letter,
        "delivered_at": n.delivered_at,
        "deadline": n.deadline,
        "ack_status": None if ack is None else ack.value,
        "actor": n.actor,
        "responded_at": n.responded_at,
        "response_metadata": n.response_metadata,
        "created_at": n.created_at,
        "updated_at": n.updated_at,
        "provider_refs": None if refs is None else provider_refs_json(refs),
        "withdrawn_at": n.withdrawn_at,
        "withdrawn_by": n.withdrawn_by,
        "withdraw_reason": n.withdraw_reason,
        "followup_at": n.followup_at,
        "followup_lease_token": n.followup_lease_token,
        "followup_lease_until": n.followup_lease_until,
        "reminders_sent": n.reminders_sent,
        "escalations_sent": n.escalations_sent,
        "followup_step": None if step is None else step.to_json(),
        "snoozed_until": n.snoozed_until,
        "snoozed_seconds": n.snoozed_seconds,
        "held_until": n.held_until,
        "held_by_window_id": n.held_by_window_id,
        "snoozes_ended": n.snoozes_ended,
    }


# Every column is written: a record field per column (``_columns`` checks the other way).
assert {f.name for f in fields(Notification)} == set(tables.notifications.c.keys())


def attempt(row: Row, lease_token: str, interrupted: str | None) -> Attempt:
    """A claimed row under its new fencing token, as it was before the claim, with an
    interrupted attempt (``store.delivery_claim``) counted as the claim counts it: the
    delivery job still held that attempt's token (``interrupted``), or the row a lease
    of a previous release's replica, whose claim had counted it already."""
    claimed = notification(row)
    if claimed.lease_token is not None:
        return Attempt(claimed, lease_token, True)
    if interrupted is None:
        return Attempt(claimed, lease_token, False)
    counted = replace(
        claimed,
        attempts=claimed.attempts + 1,
        cycle_attempts=claimed.cycle_attempts + 1,
        lease_token=interrupted,
        provider_effect_may_have_occurred=True,
    )
    return Attempt(counted, lease_token, True)


def event(row: Row) -> Event:
    return event_from_values(_EVENT(row))


def event_from_values(columns: Sequence[Any]) -> Event:
    """An event from its columns already in ``Event``'s field order (the hub's select
    of exactly those columns, read by position: no name lookup per column)."""
    values = list(columns)
    values[_E_KIND] = _KIND[values[_E_KIND]]
    return Event(*values)


def dedup_window(row: Row) -> DedupWindow:
    return DedupWindow(*_DEDUP(row))


def api_key(row: Row) -> ApiKey:
    return ApiKey(
        id=row["id"],
        key_hash=row["key_hash"],
        prefix=row["prefix"],
        principal=row["principal"],
        roles=tuple(_ROLE[r] for r in row["roles"]),
        responds_for=tuple(row["responds_for"] or ()),
        description=row["description"],
        created_at=row["created_at"],
        revoked_at=row["revoked_at"],
    )


def delivery_audit(row: Row) -> DeliveryAuditRecord:
    values = list(_DELIVERY_AUDIT(row))
    values[_DA_STATUS] = _STATUS[values[_DA_STATUS]]
    values[_DA_MODE] = _MODE[values[_DA_MODE]]
    return DeliveryAuditRecord(*values)


def ack_audit(row: Row) -> AckAuditRecord:
    values = list(_ACK_AUDIT(row))
    values[_AA_OLD] = _ACK[values[_AA_OLD]]
    values[_AA_NEW] = _ACK[values[_AA_NEW]]
    return AckAuditRecord(*values)


def job(row: Row) -> Job:
    values = list(_JOB(row))
    values[_J_KIND] = _JOB_KIND[values[_J_KIND]]
    values[_J_STATE] = _JOB_STATE[values[_J_STATE]]
    return Job(*values)


def console_session(row: Row) -> ConsoleSession:
    return ConsoleSession(*_CONSOLE_SESSION(row))


def failed_summary(row: Row) -> FailedSummary:
    return FailedSummary(
        id=row["id"],
        notification_type=row["notification_type"],
        source=row["source"],
        principal=row["principal"],
        outcome=DeliveryOutcome.from_json(row["outcome"]),
        attempts=row["attempts"],
        cycle=row["cycle"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        dedup_successor_id=row["dedup_successor_id"],
        title=str(row["title"] or ""),
        channels=tuple(str(c) for c in (row["channels"] or ())),
    )


def recent_event(row: Row) -> RecentEvent:
    return RecentEvent(
        sequence=row["sequence"],
        kind=_KIND[row["kind"]],
        at=row["at"],
        notification_id=row["notification_id"],
        channel=row["channel"],
        success=row["success"],
        error=row["error"],
        status=row["status"],
    )


def policy_type(row: Row) -> PolicyType:
    return PolicyType(row["notification_type"], row["active_revision"], row["updated_at"])


def retention_candidate(row: Row) -> RetentionCandidate:
    return RetentionCandidate(row["id"], row["dedup_owner_id"], row["dedup_successor_id"])


def policy_revision(row: Row) -> PolicyRevision:
    """A revision joined to its policy (``store.policies``)."""
    return PolicyRevision(
        policy_id=row["id"],
        notification_type=row["notification_type"],
        revision=row["revision"],
        spec=PolicySpec.from_json(row["content"]),
        content_hash=row["content_hash"],
        active=row["active_revision"] == row["revision"],
        created_by=row["created_by"],
        created_at=row["created_at"],
        activated_at=row["activated_at"],
    )
