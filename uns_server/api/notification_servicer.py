"""``uns.v1.NotificationService``: protobuf in, one service call, protobuf out."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc

from uns.v1 import notification_service_pb2 as pb
from uns.v1 import notification_service_pb2_grpc as pb_grpc
from uns.v1 import types_pb2 as t
from uns_server.api import convert
from uns_server.api.errors import to_status_message
from uns_server.api.handlers import credentials, refusal, streaming, unary
from uns_server.domain.enums import DeliveryMode, EventKind, Role, Status
from uns_server.domain.errors import FieldViolation, InvalidRequest, UnsError
from uns_server.domain.records import Notification
from uns_server.domain.requests import SendRequest
from uns_server.domain.validation import validate_notification_id
from uns_server.observability.phases import ACCEPT, phased
from uns_server.services.acks import VIA_GRPC, AckService
from uns_server.services.auth import Authenticator, Principal
from uns_server.services.intake import Intake, SendResult
from uns_server.services.operations import Operations
from uns_server.services.queries import Queries
from uns_server.services.snooze import Snoozes
from uns_server.services.watch import NOTIFICATION_IDS_MAX, StreamHeartbeat, Watch
from uns_server.services.withdrawal import Withdrawals

Ctx = grpc.aio.ServicerContext[Any, Any]
# wait_for_first_attempt returns this long before the caller's deadline at the latest.
DEADLINE_MARGIN_SECONDS = 0.2
WAIT_FOR_ATTEMPT_MAX_SECONDS = 30.0
# A ListNotifications page with more rows is converted to protobuf in a worker thread.
CONVERT_INLINE_ROWS = 20
# SPEC §6 Batches: more requests in one BatchSendNotifications is INVALID_REQUEST.
BATCH_REQUESTS_MAX = 1000
# Takes N requests from a principal's budget, all or none: None, or the refusal
# (``api.admission``).
Budget = Callable[[str, int], Awaitable[UnsError | None]]


class NotificationServicer(pb_grpc.NotificationServiceServicer):
    def __init__(
        self,
        auth: Authenticator,
        intake: Intake,
        queries: Queries,
        acks: AckService,
        operations: Operations,
        watch: Watch,
        withdrawals: Withdrawals,
        budget: Budget | None = None,
        snoozes: Snoozes | None = None,
    ) -> None:
        self.auth = auth
        self.budget = budget
        self.intake = intake
        self.queries = queries
        self.acks = acks
        self.operations = operations
        self.watch = watch
        self.withdrawals = withdrawals
        self.snoozes = snoozes

    @phased(ACCEPT)
    @unary(Role.PRODUCER)
    async def SendNotification(
        self, request: pb.SendNotificationRequest, context: Ctx, principal: Principal
    ) -> pb.SendNotificationResponse:
        result = await self.intake.send(principal.name, convert.send_request(request))
        status = result.status
        if request.wait_for_first_attempt and status == Status.PENDING:
            status = await self._wait_first_attempt(result, context)
        return _send_response(result, status)

    @phased(ACCEPT)
    @unary(Role.PRODUCER)
    async def BatchSendNotifications(
        self, request: pb.BatchSendNotificationsRequest, context: Ctx, principal: Principal
    ) -> pb.BatchSendNotificationsResponse:
        count = len(request.requests)
        if count > BATCH_REQUESTS_MAX:
            raise InvalidRequest(
                f"requests: {count} requests, at most {BATCH_REQUESTS_MAX} in one batch",
                metadata={"fields": "requests"},
                violations=[
                    FieldViolation(
                        "requests", f"at most {BATCH_REQUESTS_MAX} requests in one batch"
                    )
                ],
            )
        # Each item spends what a single send would, charged as a whole: a batch is
        # never accepted in part by the budget (``api.admission``).
        over = await self.budget(principal.name, count) if self.budget and count else None
        if over is not None:
            raise over
        items: list[SendRequest | UnsError] = []
        for item in request.requests:
            try:
                items.append(convert.send_request(item))
            except UnsError as exc:
                items.append(exc)
        results = await self.intake.send_many(principal.name, items)
        response = pb.BatchSendNotificationsResponse()
        for result in results:
            if isinstance(result, SendResult):
                response.results.add(response=_send_response(result, result.status))
            else:
                response.results.add(error=to_status_message(refusal(result)))
        return response

    async def _wait_first_attempt(self, result: SendResult, context: Ctx) -> Status:
        remaining = context.time_remaining()
        budget = WAIT_FOR_ATTEMPT_MAX_SECONDS if remaining is None else remaining
        return await self.queries.wait_first_attempt(
            result.notification_id, budget - DEADLINE_MARGIN_SECONDS
        )

    @unary(Role.PRODUCER)
    async def Simulate(
        self, request: pb.SimulateRequest, context: Ctx, principal: Principal
    ) -> pb.SimulateResponse:
        try:
            decision = await self.intake.simulate(
                principal.name, convert.send_request(request.request)
            )
        except UnsError as exc:
            raise exc.nested("request") from None
        effective = decision.effective
        response = pb.SimulateResponse(
            effective_policy=convert.effective_policy(effective),
            resolved_channels=list(effective.channels),
            delivery_mode=convert.enum_to_wire(effective.delivery_mode, DeliveryMode),
            require_ack=effective.require_ack,
            outcome=pb.SimulateOutcome.Value(f"SIMULATE_OUTCOME_{decision.outcome.value}"),
            existing_notification_id=decision.existing.id if decision.existing else "",
            dedup_owner_id=decision.owner.id if decision.owner else "",
            planned_steps=convert.planned_steps(
                decision.plan, decision.accepted_at, decision.asked, decision.messages
            ),
        )
        if decision.held_by is not None:  # the maintenance window that would hold it
            response.held_by_window_id = decision.held_by.window_id
            response.held_until.FromDatetime(decision.held_by.end_time)
        return response

    @unary(Role.PRODUCER, Role.RESPONDER, Role.OPERATOR)
    async def GetNotification(
        self, request: pb.GetNotificationRequest, context: Ctx, principal: Principal
    ) -> pb.GetNotificationResponse:
        row = await self.queries.get(principal, request.notification_id)
        return pb.GetNotificationResponse(
            notification=convert.notification(row, principal.sees_everything)
        )

    @unary(Role.PRODUCER, Role.OPERATOR)
    async def ListNotifications(
        self, request: pb.ListNotificationsRequest, context: Ctx, principal: Principal
    ) -> pb.ListNotificationsResponse:
        rows, token = await self.queries.list(
            principal, request.filter, request.page_size, request.page_token
        )
        personal = principal.sees_everything
        if len(rows) > CONVERT_INLINE_ROWS:
            # Up to a megabyte of documents into protobuf: tens of milliseconds of CPU,
            # done beside the event loop rather than on it.
            notifications = await asyncio.to_thread(_notifications, rows, personal)
        else:
            notifications = _notifications(rows, personal)
        return pb.ListNotificationsResponse(notifications=notifications, next_page_token=token)

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
            notification=convert.notification(row, principal.sees_everything),
            idempotent_replay=repeated,
        )

    @unary(Role.RESPONDER, Role.OPERATOR)
    async def SnoozeNotification(
        self, request: pb.SnoozeNotificationRequest, context: Ctx, principal: Principal
    ) -> pb.SnoozeNotificationResponse:
        # An unset duration is zero: refused by the range check (1 s to 24 h).
        duration = request.duration.ToTimedelta() if request.HasField("duration") else timedelta()
        assert self.snoozes is not None, "the composition root hands the servicer its Snoozes"
        row = await self.snoozes.snooze(principal, request.notification_id, duration)
        return pb.SnoozeNotificationResponse(
            notification=convert.notification(row, principal.sees_everything)
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
            via=VIA_GRPC,
        )
        return pb.ReplayResponse(notification=convert.notification(row, principal.sees_everything))

    @unary(Role.OPERATOR)
    async def ResolveFailure(
        self, request: pb.ResolveFailureRequest, context: Ctx, principal: Principal
    ) -> pb.ResolveFailureResponse:
        row = await self.operations.resolve_failure(
            principal,
            request.notification_id,
            request.reason,
            validate_only=request.validate_only,
            via=VIA_GRPC,
        )
        return pb.ResolveFailureResponse(
            notification=convert.notification(row, principal.sees_everything)
        )

    @unary(Role.PRODUCER, Role.OPERATOR)
    async def WithdrawNotification(
        self, request: pb.WithdrawNotificationRequest, context: Ctx, principal: Principal
    ) -> pb.WithdrawNotificationResponse:
        row = await self.withdrawals.withdraw(principal, request.notification_id, request.reason)
        return pb.WithdrawNotificationResponse(
            notification=convert.notification(row, principal.sees_everything)
        )

    @streaming(Role.PRODUCER, Role.RESPONDER, Role.OPERATOR)
    async def WatchEvents(
        self, request: pb.WatchEventsRequest, context: Ctx, principal: Principal
    ) -> AsyncIterator[pb.WatchEventsResponse]:
        if request.after_sequence < 0:
            raise InvalidRequest(
                "after_sequence must not be negative",
                violations=[FieldViolation("after_sequence", "must be >= 0")],
            )
        # Each distinct value is checked once, and ids are counted before they are: a
        # 1 MiB request holds ~350k kinds or ~25k ids, and checking every entry one by
        # one held the event loop for 100+ ms.
        distinct_ids = list(dict.fromkeys(request.notification_ids))
        if len(distinct_ids) > NOTIFICATION_IDS_MAX:
            raise InvalidRequest.of_field(
                "notification_ids", f"must hold at most {NOTIFICATION_IDS_MAX} distinct ids"
            )
        ids = [
            validate_notification_id(v, f"notification_ids[{i}]")
            for i, v in enumerate(distinct_ids)
        ]
        kinds = []
        for k in dict.fromkeys(request.kinds):
            try:
                kind = convert.enum_from_wire(EventKind, k, "kinds")
            except InvalidRequest:  # name the entry's position in the request
                convert.enum_from_wire(EventKind, k, f"kinds[{list(request.kinds).index(k)}]")
                raise
            if kind is not None:
                kinds.append(kind.value)
        cursor = await self.watch.start_cursor(request.after_sequence, request.replay_history)
        async for item in self.watch.stream(
            principal,
            cursor=cursor,
            notification_ids=ids,
            kinds=kinds,
            notification_type=request.notification_type,
            # A revoked key's stream ends (UNAUTHENTICATED) within seconds, idle or not.
            recheck=lambda: self.auth.recheck(*credentials(context)),
        ):
            if isinstance(item, StreamHeartbeat):
                yield pb.WatchEventsResponse(
                    heartbeat=pb.Heartbeat(
                        high_water_sequence=item.high_water_sequence,
                        time=convert.timestamp(utcnow()),
                    )
                )
            else:
                # People's addresses only on an operator's stream (SPEC §3).
                yield convert.watch_event(item, principal.sees_everything)


def _notifications(rows: list[Notification], personal: bool) -> list[t.Notification]:
    return [convert.notification(r, personal) for r in rows]


def utcnow() -> datetime:
    return datetime.now(UTC)


def _send_response(result: SendResult, status: Status) -> pb.SendNotificationResponse:
    return pb.SendNotificationResponse(
        notification_id=result.notification_id,
        state=convert.enum_to_wire(status, Status),
        idempotent_replay=result.idempotent_replay,
        require_ack=result.effective.require_ack,
        delivery_mode=convert.enum_to_wire(result.effective.delivery_mode, DeliveryMode),
        resolved_channels=list(result.effective.channels),
        dedup_owner_id=result.dedup_owner_id or "",
    )
