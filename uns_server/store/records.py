"""Rows to records (``domain.records``): one builder per table.

A builder reads by column name, so it takes a SQLAlchemy ``RowMapping`` and an
asyncpg ``Record`` alike (and a row with extra columns, such as the claim's
``claimed_token``). It runs on the hot path (every claim and accept reads rows), so
each reads a precomputed column list positionally into the dataclass and maps enum
values through a dict: no per-row reflection, no ``Enum.__call__``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from uns_server.domain.enums import AckStatus, DeliveryMode, EventKind, Role, Status
from uns_server.domain.records import (
    AckAuditRecord,
    ApiKey,
    Attempt,
    ConsoleSession,
    DedupWindow,
    DeliveryAuditRecord,
    Event,
    FailedSummary,
    MessageUpdate,
    Notification,
    PolicyType,
    RecentEvent,
    RetentionCandidate,
)
from uns_server.store import tables

# A row read by column name: ``RowMapping`` (keyed by name or column) or ``Record``.
Row = Mapping[Any, Any]

_STATUS: dict[str, Status] = {s.value: s for s in Status}
_ACK: dict[str | None, AckStatus | None] = {None: None} | {a.value: a for a in AckStatus}
_MODE: dict[str, DeliveryMode] = {m.value: m for m in DeliveryMode}
_KIND: dict[str, EventKind] = {k.value: k for k in EventKind}
_ROLE: dict[str, Role] = {r.value: r for r in Role}


def _columns(record: type, table: Any) -> tuple[str, ...]:
    """The record's fields, in order; each must be a column of ``table`` (checked once,
    at import, so a schema change that drops one fails loudly)."""
    names = tuple(f.name for f in fields(record))
    missing = [name for name in names if name not in table.c]
    assert not missing, f"{record.__name__}: no column {missing} in {table.name}"
    return names


_NOTIFICATION = _columns(Notification, tables.notifications)
_N_STATUS = _NOTIFICATION.index("status")
_N_MODE = _NOTIFICATION.index("delivery_mode")
_N_ACK = _NOTIFICATION.index("ack_status")
_EVENT = _columns(Event, tables.events)
_E_KIND = _EVENT.index("kind")
_DEDUP = _columns(DedupWindow, tables.dedup)
_DELIVERY_AUDIT = _columns(DeliveryAuditRecord, tables.notification_audit_records)
_ACK_AUDIT = _columns(AckAuditRecord, tables.ack_audit_records)
_MESSAGE_UPDATE = _columns(MessageUpdate, tables.message_updates)
_CONSOLE_SESSION = _columns(ConsoleSession, tables.console_sessions)


def notification(row: Row) -> Notification:
    values = [row[c] for c in _NOTIFICATION]
    values[_N_STATUS] = _STATUS[values[_N_STATUS]]
    values[_N_MODE] = _MODE[values[_N_MODE]]
    values[_N_ACK] = _ACK[values[_N_ACK]]
    return Notification(*values)


def attempt(row: Row, lease_token: str) -> Attempt:
    """A claimed row (as it was before the claim) under its new fencing token."""
    claimed = notification(row)
    return Attempt(claimed, lease_token, claimed.lease_token is not None)


def event(row: Row) -> Event:
    values = [row[c] for c in _EVENT]
    values[_E_KIND] = _KIND[values[_E_KIND]]
    return Event(*values)


def dedup_window(row: Row) -> DedupWindow:
    return DedupWindow(*[row[c] for c in _DEDUP])


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
    values = {c: row[c] for c in _DELIVERY_AUDIT}
    values["status"] = _STATUS[values["status"]]
    values["delivery_mode"] = _MODE[values["delivery_mode"]]
    return DeliveryAuditRecord(**values)


def ack_audit(row: Row) -> AckAuditRecord:
    values = {c: row[c] for c in _ACK_AUDIT}
    values["old_status"] = _ACK[values["old_status"]]
    values["new_status"] = _ACK[values["new_status"]]
    return AckAuditRecord(**values)


def message_update(row: Row) -> MessageUpdate:
    return MessageUpdate(*[row[c] for c in _MESSAGE_UPDATE])


def console_session(row: Row) -> ConsoleSession:
    return ConsoleSession(*[row[c] for c in _CONSOLE_SESSION])


def failed_summary(row: Row) -> FailedSummary:
    return FailedSummary(
        id=row["id"],
        notification_type=row["notification_type"],
        source=row["source"],
        principal=row["principal"],
        outcome=row["outcome"],
        attempts=row["attempts"],
        cycle=row["cycle"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        dedup_successor_id=row["dedup_successor_id"],
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
