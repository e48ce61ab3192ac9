"""``uns.v1.NotificationService``: protobuf in, one service call, protobuf out."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import grpc
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import notification_service_pb2_grpc as pb_grpc

from uns_server.api import convert
from uns_server.api.handlers import streaming, unary
from uns_server.domain.enums import DeliveryMode, Role, Status
from uns_server.domain.errors import Unimplemented
from uns_server.services.auth import Authenticator, Principal
from uns_server.services.intake import Intake, SendResult
from uns_server.services.queries import Queries
from uns_server.store import notifications
from uns_server.store.db import TOPIC_EVENTS, Database

Ctx = grpc.aio.ServicerContext[Any, Any]
# wait_for_first_attempt returns this long before the caller's deadline at the latest.
DEADLINE_MARGIN_SECONDS = 0.2
WAIT_FOR_ATTEMPT_MAX_SECONDS = 30.0


class NotificationServicer(pb_grpc.NotificationServiceServicer):
    def __init__(self, db: Database, auth: Authenticator, intake: Intake, queries: Queries) -> None:
        self.db = db
        self.auth = auth
        self.intake = intake
        self.queries = queries
        self._committed = asyncio.Condition()
        db.on_commit(TOPIC_EVENTS, self._notify_commit)

    def _notify_commit(self) -> None:
        async def notify() -> None:
            async with self._committed:
                self._committed.notify_all()

        asyncio.get_running_loop().create_task(notify())

    @unary(Role.PRODUCER)
    async def SendNotification(
        self, request: pb.SendNotificationRequest, context: Ctx, principal: Principal
    ) -> pb.SendNotificationResponse:
        result = await self.intake.send(principal.name, convert.send_request(request))
        status = result.status
        if request.wait_for_first_attempt and status == Status.PENDING:
            status = await self._wait_first_attempt(result, context)
        return pb.SendNotificationResponse(
            notification_id=result.notification_id,
            state=convert.enum_to_wire(status, Status),
            idempotent_replay=result.idempotent_replay,
            require_ack=result.effective.require_ack,
            delivery_mode=convert.enum_to_wire(result.effective.delivery_mode, DeliveryMode),
            resolved_channels=list(result.effective.channels),
            dedup_owner_id=result.dedup_owner_id or "",
        )

    async def _wait_first_attempt(self, result: SendResult, context: Ctx) -> Status:
        remaining = context.time_remaining()
        budget = WAIT_FOR_ATTEMPT_MAX_SECONDS if remaining is None else remaining
        deadline = asyncio.get_running_loop().time() + budget - DEADLINE_MARGIN_SECONDS
        while True:
            async with self.db.read() as conn:
                row = await notifications.by_id(conn, result.notification_id)
            assert row is not None
            settled = row["attempts"] > 0 and row["lease_token"] is None
            left = deadline - asyncio.get_running_loop().time()
            if row["status"] != Status.PENDING or settled or left <= 0:
                return Status(row["status"])
            async with self._committed:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._committed.wait(), timeout=min(left, 1.0))

    @unary(Role.PRODUCER)
    async def Simulate(
        self, request: pb.SimulateRequest, context: Ctx, principal: Principal
    ) -> pb.SimulateResponse:
        effective = await self.intake.simulate(convert.send_request(request.request))
        return pb.SimulateResponse(
            effective_policy=convert.effective_policy(effective),
            resolved_channels=list(effective.channels),
            delivery_mode=convert.enum_to_wire(effective.delivery_mode, DeliveryMode),
            require_ack=effective.require_ack,
        )

    @unary(Role.PRODUCER, Role.RESPONDER, Role.OPERATOR)
    async def GetNotification(
        self, request: pb.GetNotificationRequest, context: Ctx, principal: Principal
    ) -> pb.GetNotificationResponse:
        row = await self.queries.get(principal, request.notification_id)
        return pb.GetNotificationResponse(notification=convert.notification(row))

    @unary(Role.PRODUCER, Role.OPERATOR)
    async def ListNotifications(
        self, request: pb.ListNotificationsRequest, context: Ctx, principal: Principal
    ) -> pb.ListNotificationsResponse:
        rows, token = await self.queries.list(
            principal, request.filter, request.page_size, request.page_token
        )
        return pb.ListNotificationsResponse(
            notifications=[convert.notification(r) for r in rows], next_page_token=token
        )

    @unary(Role.RESPONDER)
    async def Acknowledge(
        self, request: pb.AcknowledgeRequest, context: Ctx, principal: Principal
    ) -> pb.AcknowledgeResponse:
        raise Unimplemented("Acknowledge is not implemented yet", metadata={"rpc": "Acknowledge"})

    @unary(Role.OPERATOR)
    async def Replay(
        self, request: pb.ReplayRequest, context: Ctx, principal: Principal
    ) -> pb.ReplayResponse:
        raise Unimplemented("Replay is not implemented yet", metadata={"rpc": "Replay"})

    @unary(Role.OPERATOR)
    async def ResolveFailure(
        self, request: pb.ResolveFailureRequest, context: Ctx, principal: Principal
    ) -> pb.ResolveFailureResponse:
        raise Unimplemented(
            "ResolveFailure is not implemented yet", metadata={"rpc": "ResolveFailure"}
        )

    @streaming(Role.PRODUCER, Role.OPERATOR)
    async def WatchEvents(
        self, request: pb.WatchEventsRequest, context: Ctx, principal: Principal
    ) -> AsyncIterator[pb.WatchEventsResponse]:
        raise Unimplemented("WatchEvents is not implemented yet", metadata={"rpc": "WatchEvents"})
        yield pb.WatchEventsResponse()  # pragma: no cover - makes this a generator
