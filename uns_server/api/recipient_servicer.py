"""``uns.v1.RecipientService``: protobuf in, one ``PeopleService`` call, protobuf out.

The operator role writes (Put, Delete); producer, responder and operator read (Get,
List, GetOnCall), so a producer can see whom its notifications may reach. A person's
contacts (email addresses, Slack users, phone numbers) and quiet hours (the daily
pattern of their private life) are personal data: only an operator reads them; other
readers get the person without them (``recipient_to_wire(..., personal=False)``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
from google.protobuf import duration_pb2, timestamp_pb2

from uns.v1 import recipient_service_pb2 as pb
from uns.v1 import recipient_service_pb2_grpc as pb_grpc
from uns_server.api import convert
from uns_server.api.handlers import unary
from uns_server.domain.enums import Role, Urgency
from uns_server.domain.errors import InvalidRequest
from uns_server.domain.people import (
    CONTACTS_MAX,
    MEMBERS_MAX,
    OVERRIDES_MAX,
    Recipient,
    Rotation,
    build_recipient,
    build_rotation,
)
from uns_server.domain.staged_rules import RULES_MAX
from uns_server.services.auth import Authenticator, Principal
from uns_server.services.people import PeopleService

Ctx = grpc.aio.ServicerContext[Any, Any]
READERS = (Role.OPERATOR, Role.PRODUCER, Role.RESPONDER)


def _time(ts: timestamp_pb2.Timestamp, present: bool) -> datetime | None:
    """None when unset or outside what a datetime holds (the builder then says so)."""
    if not present:
        return None
    try:
        return ts.ToDatetime(tzinfo=UTC)
    except (ValueError, OverflowError):
        return None


def _shift(d: duration_pb2.Duration, present: bool) -> timedelta | None:
    if not present:
        return None
    try:
        return d.ToTimedelta()
    except (ValueError, OverflowError):
        return timedelta(0)


def recipient_from_wire(r: pb.Recipient) -> Recipient:
    return build_recipient(
        r.recipient_id,
        r.display_name,
        r.time_zone,
        [(c.channel, c.address) for c in r.contacts[: CONTACTS_MAX + 1]],
        (
            (r.quiet_hours.time_zone, r.quiet_hours.start, r.quiet_hours.end)
            if r.HasField("quiet_hours")
            else None
        ),
        locale=r.locale,
        rules=[
            (
                rule.contact,
                _shift(rule.after, rule.HasField("after")),
                convert.enum_from_wire(
                    Urgency, rule.urgency, f"recipient.notification_rules[{i}].urgency"
                ),
            )
            for i, rule in enumerate(r.notification_rules[: RULES_MAX + 1])
        ],
    )


def rotation_from_wire(r: pb.Rotation) -> Rotation:
    return build_rotation(
        r.rotation_id,
        list(r.members[: MEMBERS_MAX + 1]),
        _time(r.start_time, r.HasField("start_time")),
        _shift(r.shift, r.HasField("shift")),
        r.time_zone,
        [
            (
                o.recipient_id,
                _time(o.start_time, o.HasField("start_time")),
                _time(o.end_time, o.HasField("end_time")),
            )
            for o in r.overrides[: OVERRIDES_MAX + 1]
        ],
    )


def _stamp(msg: Any, name: str, value: datetime | None) -> None:
    ts = convert.timestamp(value)
    if ts is not None:
        getattr(msg, name).CopyFrom(ts)


def recipient_to_wire(r: Recipient, personal: bool = True) -> pb.Recipient:
    """The person on the wire; without contacts and quiet hours unless ``personal``."""
    msg = pb.Recipient(
        recipient_id=r.recipient_id,
        display_name=r.display_name,
        time_zone=r.time_zone,
        updated_by=r.updated_by,
        locale=r.locale,
    )
    if personal:
        msg.contacts.extend(pb.Contact(channel=c.channel, address=c.address) for c in r.contacts)
        quiet = convert.quiet_hours(r.quiet_hours)
        if quiet is not None:
            msg.quiet_hours.CopyFrom(quiet)
        msg.notification_rules.extend(
            pb.NotificationRule(
                contact=rule.contact,
                after=convert.duration(rule.after),
                urgency=convert.enum_to_wire(rule.urgency, Urgency),
            )
            for rule in r.notification_rules
        )
    _stamp(msg, "create_time", r.created_at)
    _stamp(msg, "update_time", r.updated_at)
    return msg


def rotation_to_wire(r: Rotation) -> pb.Rotation:
    msg = pb.Rotation(
        rotation_id=r.rotation_id,
        members=list(r.members),
        shift=convert.duration(r.shift),
        time_zone=r.time_zone,
        updated_by=r.updated_by,
    )
    _stamp(msg, "start_time", r.start)
    for o in r.overrides:
        item = msg.overrides.add(recipient_id=o.recipient_id)
        _stamp(item, "start_time", o.start)
        _stamp(item, "end_time", o.end)
    _stamp(msg, "create_time", r.created_at)
    _stamp(msg, "update_time", r.updated_at)
    return msg


class RecipientServicer(pb_grpc.RecipientServiceServicer):
    def __init__(self, auth: Authenticator, people: PeopleService) -> None:
        self.auth = auth
        self.people = people

    @unary(Role.OPERATOR)
    async def PutRecipient(
        self, request: pb.PutRecipientRequest, context: Ctx, principal: Principal
    ) -> pb.PutRecipientResponse:
        stored = await self.people.put_recipient(
            principal.name, recipient_from_wire(request.recipient)
        )
        return pb.PutRecipientResponse(recipient=recipient_to_wire(stored))

    @unary(*READERS)
    async def GetRecipient(
        self, request: pb.GetRecipientRequest, context: Ctx, principal: Principal
    ) -> pb.GetRecipientResponse:
        found = await self.people.get_recipient(request.recipient_id)
        personal = principal.sees_everything
        return pb.GetRecipientResponse(recipient=recipient_to_wire(found, personal))

    @unary(*READERS)
    async def ListRecipients(
        self, request: pb.ListRecipientsRequest, context: Ctx, principal: Principal
    ) -> pb.ListRecipientsResponse:
        rows, token = await self.people.list_recipients(request.page_size, request.page_token)
        personal = principal.sees_everything
        return pb.ListRecipientsResponse(
            recipients=[recipient_to_wire(r, personal) for r in rows], next_page_token=token
        )

    @unary(Role.OPERATOR)
    async def DeleteRecipient(
        self, request: pb.DeleteRecipientRequest, context: Ctx, principal: Principal
    ) -> pb.DeleteRecipientResponse:
        gone = await self.people.delete_recipient(principal.name, request.recipient_id)
        return pb.DeleteRecipientResponse(recipient=recipient_to_wire(gone))

    @unary(Role.OPERATOR)
    async def PutRotation(
        self, request: pb.PutRotationRequest, context: Ctx, principal: Principal
    ) -> pb.PutRotationResponse:
        stored = await self.people.put_rotation(
            principal.name, rotation_from_wire(request.rotation)
        )
        return pb.PutRotationResponse(rotation=rotation_to_wire(stored))

    @unary(*READERS)
    async def GetRotation(
        self, request: pb.GetRotationRequest, context: Ctx, principal: Principal
    ) -> pb.GetRotationResponse:
        found = await self.people.get_rotation(request.rotation_id)
        return pb.GetRotationResponse(rotation=rotation_to_wire(found))

    @unary(*READERS)
    async def ListRotations(
        self, request: pb.ListRotationsRequest, context: Ctx, principal: Principal
    ) -> pb.ListRotationsResponse:
        rows, token = await self.people.list_rotations(request.page_size, request.page_token)
        return pb.ListRotationsResponse(
            rotations=[rotation_to_wire(r) for r in rows], next_page_token=token
        )

    @unary(Role.OPERATOR)
    async def DeleteRotation(
        self, request: pb.DeleteRotationRequest, context: Ctx, principal: Principal
    ) -> pb.DeleteRotationResponse:
        gone = await self.people.delete_rotation(principal.name, request.rotation_id)
        return pb.DeleteRotationResponse(rotation=rotation_to_wire(gone))

    @unary(*READERS)
    async def GetOnCall(
        self, request: pb.GetOnCallRequest, context: Ctx, principal: Principal
    ) -> pb.GetOnCallResponse:
        at = None
        if request.HasField("time"):
            at = _time(request.time, True)
            if at is None:
                raise InvalidRequest.of_field("time", "is not a valid timestamp")
        _rotation, when, answer = await self.people.on_call(request.rotation_id, at)
        msg = pb.GetOnCallResponse(
            recipient_id=answer.recipient_id,
            override=answer.override,
            next_recipient_id=answer.next_recipient_id,
        )
        _stamp(msg, "shift_end_time", answer.until)
        _stamp(msg, "time", when)
        return msg
