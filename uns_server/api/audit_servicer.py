"""``uns.v1.AuditService``: the append-only audit trail of one notification (seed 000
§2.4), operator only. Protobuf in, one store read, protobuf out.

A notification has a handful of records (one per settled attempt, one per ack
transition), so a page is an OFFSET/LIMIT slice of the notification's records in write
order (ties broken by id), and the page token carries the notification id and the
offset. Records are never updated or deleted while the notification exists, so the
offset of a record never moves.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Any, Protocol

import grpc
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from uns.v1 import audit_service_pb2 as pb
from uns.v1 import audit_service_pb2_grpc as pb_grpc
from uns_server.api import convert
from uns_server.api.handlers import unary
from uns_server.domain import paging
from uns_server.domain.enums import AckStatus, AutonomyMode, DeliveryMode, Intent, Role, Status
from uns_server.domain.errors import InvalidRequest
from uns_server.domain.validation import validate_notification_id
from uns_server.services.auth import Authenticator, Principal
from uns_server.store import audit
from uns_server.store.db import Database

Ctx = grpc.aio.ServicerContext[Any, Any]


class Reader(Protocol):
    def __call__(
        self, conn: AsyncConnection, notification_id: str, *, offset: int, limit: int
    ) -> Awaitable[list[RowMapping]]: ...


def _encode_token(notification_id: str, offset: int) -> str:
    return paging.encode_token(notification_id, offset)


def _decode_token(token: str, notification_id: str) -> int:
    try:
        owner, offset = paging.decode_token(token, 2)
        if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset < 2**31:
            raise ValueError(offset)
    except ValueError:
        raise InvalidRequest.of_field("page_token", "not a token from this server") from None
    if owner != notification_id:
        raise InvalidRequest.of_field("page_token", "the token belongs to a different notification")
    return offset


def _enum(value: str | None, cls: Any) -> Any:
    return convert.enum_to_wire(value or None, cls)


def delivery_record(row: RowMapping) -> pb.DeliveryAuditRecord:
    msg = pb.DeliveryAuditRecord(
        id=row["id"],
        notification_id=row["notification_id"],
        notification_type=row["notification_type"],
        state=_enum(row["status"], Status),
        channels_attempted=row["channels_attempted"],
        channels_succeeded=row["channels_succeeded"],
        channels_failed=row["channels_failed"],
        error_message=row["error_message"] or "",
        intent=_enum(row["intent"], Intent),
        delivery_mode=_enum(row["delivery_mode"], DeliveryMode),
        autonomy_mode=_enum(row["autonomy_mode"], AutonomyMode),
        agent_id=row["agent_id"] or "",
        policy_config_id=row["policy_config_id"] or "",
        policy_config_hash=row["policy_config_hash"] or "",
    )
    for field, column in (("deliver_time", "delivered_at"), ("create_time", "created_at")):
        ts = convert.timestamp(row[column])
        if ts is not None:
            getattr(msg, field).CopyFrom(ts)
    return msg


def ack_record(row: RowMapping) -> pb.AckAuditRecord:
    msg = pb.AckAuditRecord(
        id=row["id"],
        notification_id=row["notification_id"],
        old_state=_enum(row["old_status"], AckStatus),
        new_state=_enum(row["new_status"], AckStatus),
        acked_by=row["acked_by"],
        via=row.get("via") or "",
    )
    if row["ack_metadata"] is not None:
        msg.ack_metadata.CopyFrom(convert.dict_to_struct(row["ack_metadata"]))
    for field, column in (("ack_time", "acked_at"), ("create_time", "created_at")):
        ts = convert.timestamp(row[column])
        if ts is not None:
            getattr(msg, field).CopyFrom(ts)
    return msg


class AuditServicer(pb_grpc.AuditServiceServicer):
    def __init__(self, db: Database, auth: Authenticator) -> None:
        self.db = db
        self.auth = auth

    async def _page(
        self, read: Reader, notification_id: str, page_size: int, page_token: str
    ) -> tuple[Sequence[RowMapping], str]:
        nid = validate_notification_id(notification_id)
        limit = paging.page_limit(page_size)
        offset = _decode_token(page_token, nid) if page_token else 0
        async with self.db.read() as conn:
            rows = await read(conn, nid, offset=offset, limit=limit + 1)  # one more: a next page?
        end = offset + limit
        return rows[:limit], _encode_token(nid, end) if len(rows) > limit else ""

    @unary(Role.OPERATOR)
    async def ListDeliveryAuditRecords(
        self, request: pb.ListDeliveryAuditRecordsRequest, context: Ctx, principal: Principal
    ) -> pb.ListDeliveryAuditRecordsResponse:
        rows, token = await self._page(
            audit.delivery_records, request.notification_id, request.page_size, request.page_token
        )
        return pb.ListDeliveryAuditRecordsResponse(
            records=[delivery_record(r) for r in rows], next_page_token=token
        )

    @unary(Role.OPERATOR)
    async def ListAckAuditRecords(
        self, request: pb.ListAckAuditRecordsRequest, context: Ctx, principal: Principal
    ) -> pb.ListAckAuditRecordsResponse:
        rows, token = await self._page(
            audit.ack_records, request.notification_id, request.page_size, request.page_token
        )
        return pb.ListAckAuditRecordsResponse(
            records=[ack_record(r) for r in rows], next_page_token=token
        )
