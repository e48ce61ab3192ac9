"""Protobuf <-> domain values. Wire enums carry a type prefix; domain enums do not."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, TypeVar, cast

from google.protobuf import struct_pb2, timestamp_pb2
from google.protobuf.internal.enum_type_wrapper import EnumTypeWrapper

from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t

# The policy's schedule and targets on the wire (re-exported: ``convert.escalation``).
from uns_server.api import recipients_wire
from uns_server.api.schedule_wire import duration as duration
from uns_server.api.schedule_wire import escalation as escalation
from uns_server.api.schedule_wire import escalation_from_wire as escalation_from_wire
from uns_server.api.schedule_wire import planned_steps as planned_steps
from uns_server.api.schedule_wire import quiet_hours as quiet_hours
from uns_server.api.schedule_wire import reminder as reminder
from uns_server.api.schedule_wire import reminder_from_wire as reminder_from_wire
from uns_server.api.schedule_wire import targets as targets
from uns_server.api.schedule_wire import targets_from_wire as targets_from_wire
from uns_server.domain import personal as personal_data
from uns_server.domain.enums import (
    AckStatus,
    AutonomyMode,
    DeliveryMode,
    EventKind,
    Intent,
    Priority,
    Status,
    Urgency,
)
from uns_server.domain.errors import FieldViolation, InvalidRequest, ReservedMetadataKey
from uns_server.domain.outcomes import ProviderRef
from uns_server.domain.policy import EffectivePolicy
from uns_server.domain.records import Event, Notification
from uns_server.domain.requests import AutonomyContext, SendRequest
from uns_server.domain.validation import METADATA_MAX_BYTES, validate_send
from uns_server.services.watch import WatchItem

E = TypeVar("E", bound=StrEnum)
# A Struct's wire form is at most ~6x its compact JSON (a number in a list: 2 JSON bytes,
# 11 on the wire), so one larger than this is over METADATA_MAX_BYTES for certain.
STRUCT_WIRE_MAX_BYTES = 8 * METADATA_MAX_BYTES

_PREFIX = {
    Intent: ("NOTIFICATION_INTENT_", t.NotificationIntent),
    AutonomyMode: ("AUTONOMY_MODE_", t.AutonomyMode),
    DeliveryMode: ("DELIVERY_MODE_", t.DeliveryMode),
    Priority: ("PRIORITY_", t.Priority),
    Status: ("NOTIFICATION_STATE_", t.NotificationState),
    AckStatus: ("ACK_STATE_", t.AckState),
    EventKind: ("EVENT_KIND_", t.EventKind),
    Urgency: ("URGENCY_", t.Urgency),
}


def _wrapper(w: Any) -> EnumTypeWrapper:
    assert isinstance(w, EnumTypeWrapper)
    return w


# Both directions as plain dicts, built once: every call converts several enums, and
# the descriptor lookups plus StrEnum construction cost more than the rest of the mapping.
_FROM_WIRE: dict[type[StrEnum], dict[int, StrEnum]] = {
    cls: {
        number: cls(name.removeprefix(prefix))
        for name, number in _wrapper(wrapper).items()
        if number != 0 and name.removeprefix(prefix) in cls._value2member_map_
    }
    for cls, (prefix, wrapper) in _PREFIX.items()
}
_TO_WIRE: dict[type[StrEnum], dict[StrEnum, int]] = {
    cls: {member: number for number, member in members.items()}
    for cls, members in _FROM_WIRE.items()
}


def enum_from_wire(cls: type[E], value: int, field: str) -> E | None:
    """Domain enum for a wire value; None for *_UNSPECIFIED; INVALID_REQUEST if unknown."""
    if value == 0:
        return None
    member = _FROM_WIRE[cls].get(value)
    if member is None:
        raise InvalidRequest.of_field(field, f"unknown enum value {value}")
    return cast(E, member)


def enum_to_wire(value: StrEnum | str | None, cls: type[StrEnum]) -> Any:
    """The wire number (typed Any: each generated enum has its own ValueType)."""
    if value is None:
        return 0
    return _TO_WIRE[cls][cls(value)]


def struct_to_dict(s: struct_pb2.Struct, field: str = "metadata") -> dict[str, Any]:
    """A request Struct as JSON-like values; INVALID_REQUEST for NaN or infinite numbers,
    which a Struct can carry but JSON (and so the stored document) cannot. A Struct
    whose wire size alone proves it over the metadata limit is refused before it is
    converted: converting ~1 MiB of small fields held the event loop for 100+ ms."""
    if s.ByteSize() > STRUCT_WIRE_MAX_BYTES:
        raise InvalidRequest.of_field(
            field, f"must be at most {METADATA_MAX_BYTES} bytes serialized (is far larger)"
        )
    try:
        return _struct(s)
    except ValueError:
        raise InvalidRequest.of_field(field, "numbers must be finite doubles") from None


# json_format.MessageToDict's values for a Struct, walked directly: its generic
# descriptor-driven path took half of ``send_request`` (docs/PERFORMANCE.md, issue 24).
def _struct(s: struct_pb2.Struct) -> dict[str, Any]:
    return {key: _value(value) for key, value in s.fields.items()}


def _value(v: struct_pb2.Value) -> Any:
    kind = v.WhichOneof("kind")
    if kind == "string_value":
        return v.string_value
    if kind == "number_value":
        number = v.number_value
        if not math.isfinite(number):  # JSON has no NaN or infinity
            raise ValueError(f"non-finite number: {number}")
        return number
    if kind == "bool_value":
        return v.bool_value
    if kind == "struct_value":
        return _struct(v.struct_value)
    if kind == "list_value":
        return [_value(item) for item in v.list_value.values]
    return None  # null_value, or no kind set


def dict_to_struct(d: Mapping[str, Any] | None) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    if d:
        s.update(d)
    return s


def timestamp(value: datetime | None) -> timestamp_pb2.Timestamp | None:
    if value is None:
        return None
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(value)
    return ts


def send_request(req: pb.SendNotificationRequest) -> SendRequest:
    """The domain request. A value the wire carries but the domain cannot hold (an
    unknown enum number, a non-finite number in metadata) is INVALID_REQUEST, listed
    with every other field's problem in one answer."""
    unreadable: list[FieldViolation] = []

    def enum(cls: type[E], value: int, field: str) -> E | None:
        try:
            return enum_from_wire(cls, value, field)
        except InvalidRequest as exc:
            unreadable.extend(exc.violations)
            return None

    try:
        metadata = struct_to_dict(req.metadata)
    except InvalidRequest as exc:
        unreadable.extend(exc.violations)
        metadata = {}
    schedule = None
    if req.HasField("schedule_time"):
        try:
            schedule = req.schedule_time.ToDatetime(tzinfo=UTC)
        except (ValueError, OverflowError):
            unreadable.append(FieldViolation("schedule_time", "is not a valid timestamp"))
    ctx = None
    if req.HasField("autonomy_context"):
        ctx = AutonomyContext(
            autonomy_mode=enum(
                AutonomyMode, req.autonomy_context.autonomy_mode, "autonomy_context.autonomy_mode"
            ),
            agent_id=req.autonomy_context.agent_id,
        )
    request = SendRequest(
        notification_type=req.notification_type,
        intent=enum(Intent, req.intent, "intent"),
        title=req.title,
        message=req.message,
        source=req.source,
        idempotency_key=req.idempotency_key,
        dedup_key=req.dedup_key,
        correlation_id=req.correlation_id,
        autonomy_context=ctx,
        metadata=metadata,
        delivery_mode=enum(DeliveryMode, req.delivery_mode, "delivery_mode"),
        require_ack=req.require_ack if req.HasField("require_ack") else None,
        priority=enum(Priority, req.priority, "priority"),
        schedule_time=schedule,
    )
    if unreadable:
        # Validated here only to list the other fields' problems in the same answer; a
        # readable request is validated by the service (``services.intake``).
        seen = {v.field for v in unreadable}
        with contextlib.suppress(ReservedMetadataKey):
            try:
                validate_send(request)
            except InvalidRequest as exc:
                unreadable += [v for v in exc.violations if v.field not in seen]
        fields = ",".join(dict.fromkeys(v.field for v in unreadable))
        raise InvalidRequest(metadata={"fields": fields}, violations=unreadable)
    return request


def effective_policy(e: EffectivePolicy) -> t.EffectivePolicy:
    return t.EffectivePolicy(
        channels=list(e.channels),
        delivery_mode=enum_to_wire(e.delivery_mode, DeliveryMode),
        require_ack=e.require_ack,
        ack_timeout_minutes=e.ack_timeout_minutes,
        priority=enum_to_wire(e.priority, Priority),
        dedup_window_seconds=e.dedup_window_seconds,
        max_attempts=e.max_attempts,
        policy_id=e.policy_id or "",
        policy_revision=e.policy_revision,
        policy_hash=e.policy_hash or "",
        effective_hash=e.effective_hash,
        quiet_hours=quiet_hours(e.quiet_hours),
        reminder=reminder(e.reminder),
        escalation=escalation(e.escalation),
        targets=targets(e.targets),
        escalation_loops=e.escalation_loops,
        urgency=enum_to_wire(e.urgency, Urgency),
        matched_rule_index=e.matched_rule,
        matched_rule_filter=e.matched_rule_filter,
    )


def notification(row: Notification, personal: bool = True) -> t.Notification:
    """The row on the wire; unless ``personal`` (an operator reads it), a person's own
    message names the person (``recipient:<id>``), not their address (a contact),
    here and in the part of the outcome's error that quotes it."""
    msg = _notification(row)
    if not personal:
        people = [r for p in msg.recipients for r in p.provider_references]
        for ref in [*msg.provider_references, *people]:
            if ref.recipient_id:
                ref.recipient = personal_data.person(ref.recipient_id)
        msg.outcome.error_message = personal_data.redacted_error_message(msg.outcome.error_message)
    return msg


def _notification(row: Notification) -> t.Notification:
    doc = row.notification
    ctx = doc.autonomy_context
    outcome = row.outcome
    msg = t.Notification(
        id=row.id,
        principal=row.principal,
        notification_type=row.notification_type,
        intent=enum_to_wire(doc.intent, Intent),
        title=doc.title,
        message=doc.message,
        source=row.source,
        idempotency_key=doc.idempotency_key,
        dedup_key=doc.dedup_key,
        correlation_id=doc.correlation_id,
        metadata=dict_to_struct(doc.metadata),
        effective_policy=effective_policy(doc.effective),
        state=enum_to_wire(row.status, Status),
        dead_letter=row.dead_letter,
        outcome=t.DeliveryOutcome(
            channels_attempted=outcome.channels_attempted,
            channels_succeeded=outcome.channels_succeeded,
            channels_failed=outcome.channels_failed,
            error_message=outcome.error_message or "",
        ),
        attempts=row.attempts,
        cycle=row.cycle,
        cycle_attempts=row.cycle_attempts,
        dedup_owner_id=row.dedup_owner_id or "",
        dedup_generation=row.dedup_generation or 0,
        dedup_successor_id=row.dedup_successor_id or "",
        ack_state=enum_to_wire(row.ack_status, AckStatus),
        ack_actor=row.actor or "",
        withdraw_actor=row.withdrawn_by or "",
        withdraw_reason=row.withdraw_reason or "",
        reminders_sent=row.reminders_sent,
        escalations_sent=row.escalations_sent,
    )
    if ctx:
        msg.autonomy_context.CopyFrom(
            t.AutonomyContext(
                autonomy_mode=enum_to_wire(ctx.autonomy_mode, AutonomyMode),
                agent_id=ctx.agent_id,
            )
        )
    if row.response_metadata is not None:
        msg.response_metadata.CopyFrom(dict_to_struct(row.response_metadata))
    refs = row.provider_refs or {}
    msg.provider_references.extend(provider_reference(refs[name]) for name in sorted(refs))
    owed = row.status == Status.PENDING or row.ack_status == AckStatus.PENDING
    msg.recipients.extend(recipients_wire.recipients(outcome, refs, provider_reference, owed))
    for field, value in (
        ("next_attempt_time", row.next_attempt),
        ("lease_expire_time", row.lease_until),
        ("deliver_time", row.delivered_at),
        ("ack_deadline_time", row.deadline),
        ("respond_time", row.responded_at),
        ("create_time", row.created_at),
        ("update_time", row.updated_at),
        ("withdraw_time", row.withdrawn_at),
        ("snooze_until_time", row.snoozed_until),
    ):
        ts = timestamp(value)
        if ts is not None:
            getattr(msg, field).CopyFrom(ts)
    if row.ack_status == AckStatus.PENDING and row.followup_at is not None:
        msg.next_follow_up_time.FromDatetime(row.followup_at)
    if doc.schedule_time is not None:
        msg.schedule_time.FromDatetime(doc.schedule_time)
    if row.status == Status.PENDING and row.held_until is not None:  # a maintenance window's
        msg.held_until.FromDatetime(row.held_until)
        msg.held_by_window_id = row.held_by_window_id or ""
    return msg


def provider_reference(ref: ProviderRef) -> t.ProviderReference:
    """A stored provider reference (``workers.dispatch.references.reference``) on the wire."""
    msg = t.ProviderReference(
        channel=ref.channel,
        channel_type=ref.channel_type,
        recipient=ref.recipient,
        message_id=ref.message_id,
        attempt=ref.attempt,
        cycle=ref.cycle,
        slack_channel=ref.slack_channel,
        slack_ts=ref.slack_ts,
        email_message_id=ref.email_message_id,
        pagerduty_dedup_key=ref.pagerduty_dedup_key,
        webhook_id=ref.webhook_id,
        follow_up=ref.follow_up,
        follow_up_number=ref.follow_up_number,
        recipient_id=ref.recipient_id,
    )
    if ref.at is not None:
        msg.accept_time.FromDatetime(ref.at)
    return msg


def event(ev: Event, payload: Mapping[str, Any] | None = None) -> t.Event:
    """The event on the wire; ``payload`` in place of its own (a redacted one)."""
    msg = t.Event(
        id=ev.id,
        sequence=ev.sequence,
        notification_id=ev.notification_id,
        kind=enum_to_wire(ev.kind, EventKind),
        payload=dict_to_struct(ev.payload if payload is None else payload),
    )
    msg.at.FromDatetime(ev.at)
    return msg


def watch_event(item: WatchItem, personal: bool = True) -> pb.WatchEventsResponse:
    """The response carrying ``item``, built once per event and shared by every stream
    the event reaches (grpc only reads it to serialize). Unless ``personal`` (an
    operator's stream), without people's addresses (``domain.personal``): that
    encoding too is built once, by the first such stream the event reaches, and is
    the shared one itself when the payload names no address."""
    if item.encoded is None:
        item.encoded = pb.WatchEventsResponse(event=event(item.event))
    if personal:
        return cast(pb.WatchEventsResponse, item.encoded)
    if item.redacted is None:
        payload = personal_data.redacted_payload(item.event.payload)
        item.redacted = (
            item.encoded
            if payload is None
            else pb.WatchEventsResponse(event=event(item.event, payload))
        )
    return cast(pb.WatchEventsResponse, item.redacted)
