"""``uns-admin recipients|rotations|oncall`` over ``uns.v1.RecipientService`` (the remote
mode): the ``cli.people.PeopleBackend`` the shared commands call, answering with the same
``domain.people`` values as the database mode."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import grpc

from uns.v1 import recipient_service_pb2 as pb
from uns.v1 import recipient_service_pb2_grpc as pb_grpc
from uns_clients import ClientConfig
from uns_server.api.recipient_servicer import (
    recipient_from_wire,
    recipient_to_wire,
    rotation_from_wire,
    rotation_to_wire,
)
from uns_server.cli.people import PAGE_SIZE
from uns_server.cli.remote.connection import call
from uns_server.domain.oncall import OnCall
from uns_server.domain.people import Recipient, Rotation


def _at(ts: object, present: bool) -> datetime | None:
    return ts.ToDatetime(tzinfo=UTC) if present else None  # type: ignore[attr-defined]


def _recipient(wire: pb.Recipient) -> Recipient:
    return replace(
        recipient_from_wire(wire),
        created_at=_at(wire.create_time, wire.HasField("create_time")),
        updated_at=_at(wire.update_time, wire.HasField("update_time")),
        updated_by=wire.updated_by,
    )


def _rotation(wire: pb.Rotation) -> Rotation:
    return replace(
        rotation_from_wire(wire),
        created_at=_at(wire.create_time, wire.HasField("create_time")),
        updated_at=_at(wire.update_time, wire.HasField("update_time")),
        updated_by=wire.updated_by,
    )


class RemotePeople:
    def __init__(self, channel: grpc.aio.Channel, config: ClientConfig) -> None:
        self._stub = pb_grpc.RecipientServiceStub(channel)
        self._config = config

    async def put_recipient(self, recipient: Recipient) -> Recipient:
        request = pb.PutRecipientRequest(recipient=recipient_to_wire(recipient))
        return _recipient((await call(self._config, self._stub.PutRecipient, request)).recipient)

    async def get_recipient(self, recipient_id: str) -> Recipient:
        request = pb.GetRecipientRequest(recipient_id=recipient_id)
        return _recipient((await call(self._config, self._stub.GetRecipient, request)).recipient)

    async def list_recipients(self) -> list[Recipient]:
        out: list[Recipient] = []
        token = ""
        while True:
            request = pb.ListRecipientsRequest(page_size=PAGE_SIZE, page_token=token)
            reply = await call(self._config, self._stub.ListRecipients, request)
            out += [_recipient(r) for r in reply.recipients]
            token = reply.next_page_token
            if not token:
                return out

    async def delete_recipient(self, recipient_id: str) -> Recipient:
        request = pb.DeleteRecipientRequest(recipient_id=recipient_id)
        reply = await call(self._config, self._stub.DeleteRecipient, request)
        return _recipient(reply.recipient)

    async def put_rotation(self, rotation: Rotation) -> Rotation:
        request = pb.PutRotationRequest(rotation=rotation_to_wire(rotation))
        return _rotation((await call(self._config, self._stub.PutRotation, request)).rotation)

    async def get_rotation(self, rotation_id: str) -> Rotation:
        request = pb.GetRotationRequest(rotation_id=rotation_id)
        return _rotation((await call(self._config, self._stub.GetRotation, request)).rotation)

    async def list_rotations(self) -> list[Rotation]:
        out: list[Rotation] = []
        token = ""
        while True:
            request = pb.ListRotationsRequest(page_size=PAGE_SIZE, page_token=token)
            reply = await call(self._config, self._stub.ListRotations, request)
            out += [_rotation(r) for r in reply.rotations]
            token = reply.next_page_token
            if not token:
                return out

    async def delete_rotation(self, rotation_id: str) -> Rotation:
        request = pb.DeleteRotationRequest(rotation_id=rotation_id)
        return _rotation((await call(self._config, self._stub.DeleteRotation, request)).rotation)

    async def on_call(self, rotation_id: str, at: datetime | None) -> tuple[datetime, OnCall]:
        request = pb.GetOnCallRequest(rotation_id=rotation_id)
        if at is not None:
            request.time.FromDatetime(at)
        reply = await call(self._config, self._stub.GetOnCall, request)
        answer = OnCall(
            recipient_id=reply.recipient_id,
            until=reply.shift_end_time.ToDatetime(tzinfo=UTC),
            override=reply.override,
            next_recipient_id=reply.next_recipient_id,
        )
        return reply.time.ToDatetime(tzinfo=UTC), answer
