"""``uns.v1.AuditService``: the append-only audit trail of one notification (seed 000
§2.4), operator only. Protobuf in, one page from ``services.audit``, protobuf out."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import grpc

from uns.v1 import audit_service_pb2 as pb
from uns.v1 import audit_service_pb2_grpc as pb_grpc
from uns_server.api import convert
from uns_server.api.handlers import unary
from uns_server.domain.enums import AckStatus, AutonomyMode, DeliveryMode, Intent, Role, Status
from uns_server.domain.records import AckAuditRecord, DeliveryAuditRecord
from uns_server.services.acks import recipient_of
from uns_server.services.audit import AuditTrail
from uns_server.services.auth import Authenticator, Principal

Ctx = grpc.aio.ServicerContext[Any, Any]


def _enum(value: str | None, cls: Any) -> Any:
    return convert.enum_to_wire(value or None, cls)


def delivery_record(rec: DeliveryAuditRecord) -> pb.DeliveryAuditRecord:
    msg = pb.DeliveryAuditRecord(
        id=rec.id,
        notification_id=rec.notification_id,
        notification_type=rec.notification_type,
        state=_enum(rec.status, Status),
        channels_attempted=rec.channels_attempted,
        channels_succeeded=rec.channels_succeeded,
        channels_failed=rec.channels_failed,
        error_message=rec.error_message or "",
        intent=_enum(rec.intent, Intent),
        delivery_mode=_enum(rec.delivery_mode, DeliveryMode),
        autonomy_mode=_enum(rec.autonomy_mode, AutonomyMode),
        agent_id=rec.agent_id or "",
        policy_config_id=rec.policy_config_id or "",
        policy_config_hash=rec.policy_config_hash or "",
    )
    _times(msg, deliver_time=rec.delivered_at, create_time=rec.created_at)
    return msg


def ack_record(rec: AckAuditRecord) -> pb.AckAuditRecord:
    msg = pb.AckAuditRecord(
        id=rec.id,
        notification_id=rec.notification_id,
        old_state=_enum(rec.old_status, AckStatus),
        new_state=_enum(rec.new_status, AckStatus),
        acked_by=rec.acked_by,
        via=rec.via or "",
        recipient_id=recipient_of(rec.acked_by or "").get("recipient_id", ""),
    )
    if rec.ack_metadata is not None:
        msg.ack_metadata.CopyFrom(convert.dict_to_struct(rec.ack_metadata))
    _times(msg, ack_time=rec.acked_at, create_time=rec.created_at)
    return msg


def _times(msg: Any, **times: datetime | None) -> None:
    for field, value in times.items():
        ts = convert.timestamp(value)
        if ts is not None:
            getattr(msg, field).CopyFrom(ts)


class AuditServicer(pb_grpc.AuditServiceServicer):
    def __init__(self, trail: AuditTrail, auth: Authenticator) -> None:
        self.trail = trail
        self.auth = auth

    @unary(Role.OPERATOR)
    async def ListDeliveryAuditRecords(
        self, request: pb.ListDeliveryAuditRecordsRequest, context: Ctx, principal: Principal
    ) -> pb.ListDeliveryAuditRecordsResponse:
        records, token = await self.trail.delivery_records(
            request.notification_id, request.page_size, request.page_token
        )
        return pb.ListDeliveryAuditRecordsResponse(
            records=[delivery_record(r) for r in records], next_page_token=token
        )

    @unary(Role.OPERATOR)
    async def ListAckAuditRecords(
        self, request: pb.ListAckAuditRecordsRequest, context: Ctx, principal: Principal
    ) -> pb.ListAckAuditRecordsResponse:
        records, token = await self.trail.ack_records(
            request.notification_id, request.page_size, request.page_token
        )
        return pb.ListAckAuditRecordsResponse(
            records=[ack_record(r) for r in records], next_page_token=token
        )
