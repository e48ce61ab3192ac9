"""``uns.v1.NotificationService``: protobuf in, one service call, protobuf out."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import grpc

from uns.v1 import notification_service_pb2 as pb
from uns.v1 import notification_service_pb2_grpc as pb_grpc
from uns_server.aio import wait_event
from uns_server.api import convert
from uns_server.api.handlers import streaming, unary
from uns_server.domain.enums import DeliveryMode, EventKind, Role, Status
from uns_server.domain.errors import FieldViolation, InvalidRequest
from uns_server.domain.validation import validate_notification_id
from uns_server.services.acks import Acks
from uns_server.services.auth import Authenticator, Principal
from uns_server.services.intake import Intake, SendResult
from uns_server.services.operations import Operations
from uns_server.services.queries import Queries
from uns_server.services.watch import Heartbeat, Watch
from uns_server.services.withdrawal import Withdrawals
from uns_server.store import notifications
from uns_server.store.db import TOPIC_EVENTS, Database

Ctx = grpc.aio.ServicerContext[Any, Any]
# wait_for_first_attempt returns this long before the caller's deadline at the latest.
DEADLINE_MARGIN_SECONDS = 0.2
WAIT_FOR_ATTEMPT_MAX_SECONDS = 30.0


class NotificationServicer(pb_grpc.NotificationServiceServicer):
    def __init__(
        self,
        db: Database,
        auth: Authenticator,
        intake: Intake,
        queries: Queries,
        acks: Acks,
        operations: Operations,
        watch: Watch,
        withdrawals: Withdrawals,
    ) -> None:
        self.db = db
        self.auth = auth
        self.intake = intake
        self.queries = queries
        self.acks = acks
        self.operations = operations
        self.watch = watch
        self.withdrawals = withdrawals
        # Replaced on every commit: a waiter that took the current one before reading
        # the database cannot miss a commit that lands between its read and its wait.
        self._committed = asyncio.Event()
        db.on_commit(TOPIC_EVENTS, self._notify_commit)

    def _notify_commit(self) -> None:
        self._committed.set()
        self._committed = asyncio.Event()

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
            committed = self._committed
            async with self.db.read() as conn:
                row = await notifications.by_id(conn, result.notification_id)
            assert row is not None
            settled = row["attempts"] > 0 and row["lease_token"] is None
            # Scheduled for later, or held by quiet hours: no attempt to wait for now.
            later = row["attempts"] == 0 and row["next_attempt"] > row["created_at"]
            left = deadline - asyncio.get_running_loop().time()
            if row["status"] != Status.PENDING or settled or later or left <= 0:
                return Status(row["status"])
            await wait_event(committed, min(left, 1.0))

    @unary(Role.PRODUCER)
    async def Simulate(
        self, request: pb.SimulateRequest, context: Ctx, principal: Principal
    ) -> pb.SimulateResponse:
        decision = await self.intake.simulate(principal.name, convert.send_request(request.request))
        effective = decision.effective
        return pb.SimulateResponse(
            effective_policy=convert.effective_policy(effective),
            resolved_channels=list(effective.channels),
            delivery_mode=convert.enum_to_wire(effective.delivery_mode, DeliveryMode),
            require_ack=effective.require_ack,
            outcome=pb.SimulateOutcome.Value(f"SIMULATE_OUTCOME_{decision.outcome.value}"),
            existing_notification_id=decision.existing["id"] if decision.existing else "",
            dedup_owner_id=decision.owner["id"] if decision.owner else "",
            planned_steps=convert.planned_steps(decision.plan, decision.accepted_at),
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

    @unary(Role.RESPONDER, Role.OPERATOR)
    async def Acknowledge(
        self, request: pb.AcknowledgeRequest, context: Ctx, principal: Principal
    ) -> pb.AcknowledgeResponse:
        row, repeated = await self.acks.acknowledge(
            principal,
            request.notification_id,
            dismiss=request.dismiss,
            metadata=convert.struct_to_dict(request.metadata),
        )
        return pb.AcknowledgeResponse(
            notification=convert.notification(row), idempotent_replay=repeated
        )

    @unary(Role.OPERATOR)
    async def Replay(
        self, request: pb.ReplayRequest, context: Ctx, principal: Principal
    ) -> pb.ReplayResponse:
        row = await self.operations.replay(
            principal,
            request.notification_id,
            request.reason,
            validate_only=request.validate_only,
        )
        return pb.ReplayResponse(notification=convert.notification(row))

    @unary(Role.OPERATOR)
    async def ResolveFailure(
        self, request: pb.ResolveFailureRequest, context: Ctx, principal: Principal
    ) -> pb.ResolveFailureResponse:
        row = await self.operations.resolve_failure(
            principal,
            request.notification_id,
            request.reason,
            validate_only=request.validate_only,
        )
        return pb.ResolveFailureResponse(notification=convert.notification(row))

    @unary(Role.PRODUCER, Role.OPERATOR)
    async def WithdrawNotification(
        self, request: pb.WithdrawNotificationRequest, context: Ctx, principal: Principal
    ) -> pb.WithdrawNotificationResponse:
        row = await self.withdrawals.withdraw(principal, request.notification_id, request.reason)
        return pb.WithdrawNotificationResponse(notification=convert.notification(row))

    @streaming(Role.PRODUCER, Role.RESPONDER, Role.OPERATOR)
    async def WatchEvents(
        self, request: pb.WatchEventsRequest, context: Ctx, principal: Principal
    ) -> AsyncIterator[pb.WatchEventsResponse]:
        if request.after_sequence < 0:
            raise InvalidRequest(
                "after_sequence must not be negative",
                violations=[FieldViolation("after_sequence", "must be >= 0")],
            )
        ids = [
            validate_notification_id(v, f"notification_ids[{i}]")
            for i, v in enumerate(request.notification_ids)
        ]
        kinds = [
            kind.value
            for i, k in enumerate(request.kinds)
            if (kind := convert.enum_from_wire(EventKind, k, f"kinds[{i}]")) is not None
        ]
        cursor = await self.watch.start_cursor(request.after_sequence, request.replay_history)
        async for item in self.watch.stream(
            principal,
            cursor=cursor,
            notification_ids=ids,
            kinds=kinds,
            notification_type=request.notification_type,
        ):
            if isinstance(item, Heartbeat):
                yield pb.WatchEventsResponse(
                    heartbeat=pb.Heartbeat(
                        high_water_sequence=item.high_water_sequence,
                        time=convert.timestamp(utcnow()),
                    )
                )
            else:
                yield convert.watch_event(item)


def utcnow() -> datetime:
    return datetime.now(UTC)
