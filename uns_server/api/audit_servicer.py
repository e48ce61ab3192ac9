"""``uns.v1.AuditService``: the append-only audit trail of one notification (seed 000
§2.4), operator only. Protobuf in, one page from ``services.audit``, protobuf out."""

from __future__ import annotations

from typing import Any

import grpc
from sqlalchemy.engine import RowMapping

from uns.v1 import audit_service_pb2 as pb
from uns.v1 import audit_service_pb2_grpc as pb_grpc
from uns_server.api import convert
from uns_server.api.handlers import unary
from uns_server.domain.enums import AckStatus, AutonomyMode, DeliveryMode, Intent, Role, Status
from uns_server.services.audit import AuditTrail
from uns_server.services.auth import Authenticator, Principal

Ctx = grpc.aio.ServicerContext[Any, Any]


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
    def __init__(self, trail: AuditTrail, auth: Authenticator) -> None:
        self.trail = trail
        self.auth = auth

    @unary(Role.OPERATOR)
    async def ListDeliveryAuditRecords(
        self, request: pb.ListDeliveryAuditRecordsRequest, context: Ctx, principal: Principal
    ) -> pb.ListDeliveryAuditRecordsResponse:
        rows, token = await self.trail.delivery_records(
            request.notification_id, request.page_size, request.page_token
        )
        return pb.ListDeliveryAuditRecordsResponse(
            records=[delivery_record(r) for r in rows], next_page_token=token
        )

    @unary(Role.OPERATOR)
    async def ListAckAuditRecords(
        self, request: pb.ListAckAuditRecordsRequest, context: Ctx, principal: Principal
    ) -> pb.ListAckAuditRecordsResponse:
        rows, token = await self.trail.ack_records(
            request.notification_id, request.page_size, request.page_token
        )
        return pb.ListAckAuditRecordsResponse(
            records=[ack_record(r) for r in rows], next_page_token=token
        )
