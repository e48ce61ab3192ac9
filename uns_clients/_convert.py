"""Python values -> request messages. Nothing here talks to the network."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Required, TypeAlias, TypedDict, TypeVar

from google.protobuf import struct_pb2
from google.protobuf.internal import enum_type_wrapper

from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t
from uns_clients._errors import UnsError, error_from_status

_V = TypeVar("_V", bound=int)

IntentLike: TypeAlias = "t.NotificationIntent.ValueType | str"
"""A ``NotificationIntent`` value, its full name, or its short name such as ``"WARNING"``."""
AutonomyModeLike: TypeAlias = "t.AutonomyMode.ValueType | str"
DeliveryModeLike: TypeAlias = "t.DeliveryMode.ValueType | str"
PriorityLike: TypeAlias = "t.Priority.ValueType | str"
EventKindLike: TypeAlias = "t.EventKind.ValueType | str"


class SendFields(TypedDict, total=False):
    """The keyword arguments of ``send()`` and ``simulate()``: the fields of
    ``SendNotificationRequest`` as Python values. Enums take the value, its full name or
    its short name (``intent="WARNING"``)."""

    notification_type: Required[str]
    intent: Required[IntentLike]
    title: Required[str]
    message: Required[str]
    source: Required[str]
    idempotency_key: str
    dedup_key: str
    correlation_id: str
    autonomy_mode: AutonomyModeLike
    agent_id: str
    metadata: Mapping[str, Any]
    delivery_mode: DeliveryModeLike
    require_ack: bool
    priority: PriorityLike
    wait_for_first_attempt: bool
    schedule_time: datetime
    """When to make the first attempt (an aware datetime); past means now, at most 90
    days ahead."""


def enum_value(wrapper: enum_type_wrapper._EnumTypeWrapper[_V], value: _V | str) -> _V:
    """``value`` as a number of ``wrapper``'s enum: numbers pass through (the server
    validates them), names may omit the enum's prefix (``"WARNING"``)."""
    if not isinstance(value, str):
        return value
    name = value.strip().upper()
    prefix = _enum_prefix(wrapper)
    names = wrapper.keys()
    for candidate in (name, prefix + name):
        if candidate in names:
            return wrapper.Value(candidate)
    known = ", ".join(k.removeprefix(prefix) for k in names if not k.endswith("_UNSPECIFIED"))
    raise ValueError(f"unknown {wrapper.DESCRIPTOR.name} {value!r}; expected one of {known}")


def _enum_prefix(wrapper: enum_type_wrapper._EnumTypeWrapper[Any]) -> str:
    # NotificationIntent -> NOTIFICATION_INTENT_
    name = wrapper.DESCRIPTOR.name
    return "".join("_" + c if c.isupper() and i else c for i, c in enumerate(name)).upper() + "_"


def struct(values: Mapping[str, Any]) -> struct_pb2.Struct:
    """A ``google.protobuf.Struct`` from a JSON-like mapping."""
    message = struct_pb2.Struct()
    message.update(dict(values))
    return message


def send_request(fields: SendFields, *, generate_key: bool = True) -> pb.SendNotificationRequest:
    """The request for ``fields``; with ``generate_key``, a new UUID4 idempotency key
    when ``fields`` has none.

    The key is chosen here, before the first attempt, so every retry of the call repeats
    it and the server returns the original notification instead of creating another.
    """
    unknown = set(fields) - set(SendFields.__annotations__)
    if unknown:
        raise TypeError(f"unexpected send field(s): {', '.join(sorted(unknown))}")
    request = pb.SendNotificationRequest(
        notification_type=fields["notification_type"],
        intent=enum_value(t.NotificationIntent, fields["intent"]),
        title=fields["title"],
        message=fields["message"],
        source=fields["source"],
        idempotency_key=fields.get("idempotency_key")
        or (new_idempotency_key() if generate_key else ""),
        dedup_key=fields.get("dedup_key", ""),
        correlation_id=fields.get("correlation_id", ""),
        wait_for_first_attempt=fields.get("wait_for_first_attempt", False),
    )
    if "autonomy_mode" in fields or "agent_id" in fields:
        request.autonomy_context.CopyFrom(
            t.AutonomyContext(
                autonomy_mode=enum_value(
                    t.AutonomyMode, fields.get("autonomy_mode", t.AUTONOMY_MODE_UNSPECIFIED)
                ),
                agent_id=fields.get("agent_id", ""),
            )
        )
    if "metadata" in fields:
        request.metadata.CopyFrom(struct(fields["metadata"]))
    if "delivery_mode" in fields:
        request.delivery_mode = enum_value(t.DeliveryMode, fields["delivery_mode"])
    if "require_ack" in fields:
        request.require_ack = fields["require_ack"]
    if "priority" in fields:
        request.priority = enum_value(t.Priority, fields["priority"])
    if "schedule_time" in fields:
        when = fields["schedule_time"]
        if when.tzinfo is None:
            raise ValueError("schedule_time must be an aware datetime (e.g. tzinfo=UTC)")
        request.schedule_time.FromDatetime(when)
    return request


def with_idempotency_key(request: pb.SendNotificationRequest) -> pb.SendNotificationRequest:
    """``request`` itself when it has a key, else a copy with a new one."""
    if request.idempotency_key:
        return request
    keyed = pb.SendNotificationRequest()
    keyed.CopyFrom(request)
    keyed.idempotency_key = new_idempotency_key()
    return keyed


def new_idempotency_key() -> str:
    return str(uuid.uuid4())


def watch_request(
    *,
    after_sequence: int,
    notification_ids: Iterable[str],
    kinds: Iterable[EventKindLike],
    notification_type: str,
    replay_history: bool,
) -> pb.WatchEventsRequest:
    if after_sequence < 0:
        raise ValueError("after_sequence must be >= 0")
    return pb.WatchEventsRequest(
        notification_ids=list(notification_ids),
        kinds=[enum_value(t.EventKind, k) for k in kinds],
        notification_type=notification_type,
        after_sequence=after_sequence,
        replay_history=replay_history,
    )


def batch_request(
    requests: Iterable[SendFields | pb.SendNotificationRequest],
) -> pb.BatchSendNotificationsRequest:
    """Every request as ``send_request`` would send it: one without an idempotency key
    gets a new one, so a retry of the batch replays instead of sending twice."""
    return pb.BatchSendNotificationsRequest(
        requests=[
            with_idempotency_key(r)
            if isinstance(r, pb.SendNotificationRequest)
            else send_request(r)
            for r in requests
        ]
    )


def batch_results(
    response: pb.BatchSendNotificationsResponse,
) -> list[pb.SendNotificationResponse | UnsError]:
    """One entry per request: the response, or the typed error the single send would
    have raised."""
    return [
        r.response if r.WhichOneof("result") == "response" else error_from_status(r.error)
        for r in response.results
    ]
