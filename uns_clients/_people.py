"""``AsyncPeople``: typed helpers for ``uns.v1.RecipientService`` (people, rotations,
who is on call), reached as ``AsyncClient.people``. Same retries and typed errors as
the client: reads and puts (idempotent by id) retry UNAVAILABLE; deletes do not.
"""

# ruff: noqa: ASYNC109 -- ``timeout`` is the gRPC deadline sent with each attempt.
from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

import grpc
from google.protobuf import duration_pb2, timestamp_pb2

from uns.v1 import recipient_service_pb2 as rpb
from uns.v1 import recipient_service_pb2_grpc as rpb_grpc
from uns.v1 import types_pb2 as t
from uns_clients._retry import NO_RETRY, SAFE_RETRY_ON

Unary = Callable[..., Awaitable[Any]]


def _duration(value: timedelta) -> duration_pb2.Duration:
    out = duration_pb2.Duration()
    out.FromTimedelta(value)
    return out


def _ts(value: datetime) -> timestamp_pb2.Timestamp:
    out = timestamp_pb2.Timestamp()
    out.FromDatetime(value)
    return out


class AsyncPeople:
    """People and rotations. Contacts are ``(channel, address)`` pairs, quiet hours a
    ``(time_zone, "HH:MM", "HH:MM")`` triple, overrides ``(recipient_id, start, end)``
    with aware datetimes."""

    def __init__(self, channel: grpc.aio.Channel, unary: Unary) -> None:
        self._stub = rpb_grpc.RecipientServiceStub(channel)
        self._unary = unary

    async def _call(self, rpc: str, request: Any, timeout: float | None) -> Any:
        method = getattr(self._stub, rpc)
        # A repeated delete after a lost answer would report NOT_FOUND: not retried.
        retry_on = NO_RETRY if rpc.startswith("Delete") else SAFE_RETRY_ON
        return await self._unary(rpc, method, request, retry_on, timeout)

    async def put_recipient(
        self,
        recipient_id: str,
        *,
        display_name: str,
        time_zone: str,
        contacts: Iterable[tuple[str, str]] = (),
        quiet_hours: tuple[str, str, str] | None = None,
        locale: str = "",
        notification_rules: Iterable[tuple[str, timedelta, str]] = (),
        timeout: float | None = None,
    ) -> rpb.Recipient:
        """Create or replace a person (PutRecipient; operator role). ``locale``: their
        language as a BCP 47 tag ("fr-FR"), which picks the policies' templates.
        ``notification_rules``: their staged rules as ``(contact channel, after,
        urgency)`` with urgency ``"high"`` or ``"low"``, e.g. ``[("push",
        timedelta(0), "high"), ("sms", timedelta(minutes=2), "high")]``."""
        recipient = rpb.Recipient(
            recipient_id=recipient_id,
            display_name=display_name,
            time_zone=time_zone,
            locale=locale,
            contacts=[rpb.Contact(channel=c, address=a) for c, a in contacts],
            notification_rules=[
                rpb.NotificationRule(
                    contact=contact,
                    after=_duration(after),
                    urgency=t.Urgency.Value(f"URGENCY_{urgency.upper()}"),
                )
                for contact, after, urgency in notification_rules
            ],
        )
        if quiet_hours is not None:
            zone, start, end = quiet_hours
            recipient.quiet_hours.CopyFrom(t.QuietHours(time_zone=zone, start=start, end=end))
        response = await self._call(
            "PutRecipient", rpb.PutRecipientRequest(recipient=recipient), timeout
        )
        return response.recipient  # type: ignore[no-any-return]

    async def get_recipient(
        self, recipient_id: str, *, timeout: float | None = None
    ) -> rpb.Recipient:
        response = await self._call(
            "GetRecipient", rpb.GetRecipientRequest(recipient_id=recipient_id), timeout
        )
        return response.recipient  # type: ignore[no-any-return]

    async def list_recipients(
        self, *, page_size: int = 0, timeout: float | None = None
    ) -> AsyncIterator[rpb.Recipient]:
        """Every person, by recipient_id, a page at a time."""
        token = ""
        while True:
            page = await self._call(
                "ListRecipients",
                rpb.ListRecipientsRequest(page_size=page_size, page_token=token),
                timeout,
            )
            for recipient in page.recipients:
                yield recipient
            token = page.next_page_token
            if not token:
                return

    async def delete_recipient(
        self, recipient_id: str, *, timeout: float | None = None
    ) -> rpb.Recipient:
        """Remove a person; ``RecipientInUse`` while a rotation names them or an open
        obligation is owed by them (its policy targets them, or it was sent to them)."""
        response = await self._call(
            "DeleteRecipient", rpb.DeleteRecipientRequest(recipient_id=recipient_id), timeout
        )
        return response.recipient  # type: ignore[no-any-return]

    async def put_rotation(
        self,
        rotation_id: str,
        *,
        members: Sequence[str],
        start_time: datetime,
        shift: timedelta,
        time_zone: str,
        overrides: Iterable[tuple[str, datetime, datetime]] = (),
        timeout: float | None = None,
    ) -> rpb.Rotation:
        """Create or replace a rotation (PutRotation; operator role)."""
        length = duration_pb2.Duration()
        length.FromTimedelta(shift)
        rotation = rpb.Rotation(
            rotation_id=rotation_id,
            members=list(members),
            start_time=_ts(start_time),
            shift=length,
            time_zone=time_zone,
            overrides=[
                rpb.RotationOverride(recipient_id=who, start_time=_ts(a), end_time=_ts(b))
                for who, a, b in overrides
            ],
        )
        response = await self._call(
            "PutRotation", rpb.PutRotationRequest(rotation=rotation), timeout
        )
        return response.rotation  # type: ignore[no-any-return]

    async def get_rotation(self, rotation_id: str, *, timeout: float | None = None) -> rpb.Rotation:
        response = await self._call(
            "GetRotation", rpb.GetRotationRequest(rotation_id=rotation_id), timeout
        )
        return response.rotation  # type: ignore[no-any-return]

    async def list_rotations(
        self, *, page_size: int = 0, timeout: float | None = None
    ) -> AsyncIterator[rpb.Rotation]:
        """Every rotation, by rotation_id, a page at a time."""
        token = ""
        while True:
            page = await self._call(
                "ListRotations",
                rpb.ListRotationsRequest(page_size=page_size, page_token=token),
                timeout,
            )
            for rotation in page.rotations:
                yield rotation
            token = page.next_page_token
            if not token:
                return

    async def delete_rotation(
        self, rotation_id: str, *, timeout: float | None = None
    ) -> rpb.Rotation:
        response = await self._call(
            "DeleteRotation", rpb.DeleteRotationRequest(rotation_id=rotation_id), timeout
        )
        return response.rotation  # type: ignore[no-any-return]

    async def on_call(
        self, rotation_id: str, at: datetime | None = None, *, timeout: float | None = None
    ) -> rpb.GetOnCallResponse:
        """Who is on call at ``at`` (now when None), until when, and who is next."""
        request = rpb.GetOnCallRequest(rotation_id=rotation_id)
        if at is not None:
            request.time.CopyFrom(_ts(at))
        return await self._call("GetOnCall", request, timeout)  # type: ignore[no-any-return]
