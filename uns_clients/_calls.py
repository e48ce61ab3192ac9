"""One builder per unary RPC of ``uns.v1.NotificationService``, shared by ``AsyncClient``
and the blocking ``Client``: the request, which errors are retried, what the retry log
names and what the caller gets back from the response. The clients only run a ``Call``
(awaited or blocking), so an RPC is described here once. Nothing here talks to the
network."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from uns.v1 import heartbeat_service_pb2 as hpb
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t
from uns_clients import _convert
from uns_clients._convert import SendFields
from uns_clients._errors import UnsError
from uns_clients._retry import NO_RETRY, SAFE_RETRY_ON, SEND_RETRY_ON

Req = TypeVar("Req")
Resp = TypeVar("Resp")
Out = TypeVar("Out")


def _same(response: Any) -> Any:
    return response


@dataclass(frozen=True, slots=True)
class Call(Generic[Req, Resp, Out]):
    """One RPC as both clients make it: ``rpc`` names the method of the ``service``'s
    stub (``notification``, or ``maintenance``: ``_maintenance``)."""

    rpc: str
    request: Req
    retry_on: tuple[type[UnsError], ...]
    result: Callable[[Resp], Out]
    context: Mapping[str, str] | None = None
    service: str = "notification"


def send(
    request: pb.SendNotificationRequest,
) -> Call[pb.SendNotificationRequest, pb.SendNotificationResponse, pb.SendNotificationResponse]:
    # The key is fixed before the first attempt, so every retry repeats it.
    request = _convert.with_idempotency_key(request)
    return Call(
        "SendNotification",
        request,
        SEND_RETRY_ON,
        _same,
        {"idempotency_key": request.idempotency_key},
    )


def send_many(
    requests: Iterable[SendFields | pb.SendNotificationRequest],
) -> Call[
    pb.BatchSendNotificationsRequest,
    pb.BatchSendNotificationsResponse,
    builtins.list[pb.SendNotificationResponse | UnsError],
]:
    request = _convert.batch_request(requests)
    return Call(
        "BatchSendNotifications",
        request,
        SEND_RETRY_ON,
        _convert.batch_results,
        {"requests": str(len(request.requests))},
    )


def simulate(
    request: pb.SendNotificationRequest,
) -> Call[pb.SimulateRequest, pb.SimulateResponse, pb.SimulateResponse]:
    return Call("Simulate", pb.SimulateRequest(request=request), SAFE_RETRY_ON, _same)


def _notification(
    response: pb.GetNotificationResponse
    | pb.SnoozeNotificationResponse
    | pb.ReplayResponse
    | pb.WithdrawNotificationResponse
    | pb.ResolveFailureResponse,
) -> t.Notification:
    return response.notification


def get(
    notification_id: str,
) -> Call[pb.GetNotificationRequest, pb.GetNotificationResponse, t.Notification]:
    return Call(
        "GetNotification",
        pb.GetNotificationRequest(notification_id=notification_id),
        SAFE_RETRY_ON,
        _notification,
    )


def list_page(
    filter: str, page_size: int, page_token: str
) -> Call[pb.ListNotificationsRequest, pb.ListNotificationsResponse, pb.ListNotificationsResponse]:
    return Call(
        "ListNotifications",
        pb.ListNotificationsRequest(filter=filter, page_size=page_size, page_token=page_token),
        SAFE_RETRY_ON,
        _same,
    )


def acknowledge(
    notification_id: str, dismiss: bool, metadata: Mapping[str, Any] | None
) -> Call[pb.AcknowledgeRequest, pb.AcknowledgeResponse, pb.AcknowledgeResponse]:
    request = pb.AcknowledgeRequest(notification_id=notification_id, dismiss=dismiss)
    if metadata is not None:
        request.metadata.CopyFrom(_convert.struct(metadata))
    return Call("Acknowledge", request, SAFE_RETRY_ON, _same)


def snooze(
    notification_id: str, seconds: float
) -> Call[pb.SnoozeNotificationRequest, pb.SnoozeNotificationResponse, t.Notification]:
    request = pb.SnoozeNotificationRequest(notification_id=notification_id)
    request.duration.FromNanoseconds(round(seconds * 1e9))
    # A repeat after a lost answer snoozes again from a moment later: harmless.
    return Call("SnoozeNotification", request, SAFE_RETRY_ON, _notification)


def replay(
    notification_id: str, reason: str, validate_only: bool
) -> Call[pb.ReplayRequest, pb.ReplayResponse, t.Notification]:
    return Call(
        "Replay",
        pb.ReplayRequest(
            notification_id=notification_id, reason=reason, validate_only=validate_only
        ),
        # A replay that may have been made is not repeated; a dry run is a read.
        SAFE_RETRY_ON if validate_only else NO_RETRY,
        _notification,
    )


def withdraw(
    notification_id: str, reason: str
) -> Call[pb.WithdrawNotificationRequest, pb.WithdrawNotificationResponse, t.Notification]:
    return Call(
        "WithdrawNotification",
        pb.WithdrawNotificationRequest(notification_id=notification_id, reason=reason),
        SAFE_RETRY_ON,  # the same caller gets the withdrawn notification back
        _notification,
    )


def beat(
    heartbeat_id: str,
) -> Call[hpb.BeatRequest, hpb.BeatResponse, hpb.HeartbeatMonitor]:
    """HeartbeatService.Beat: a repeat only moves the last beat again, so it retries."""
    return Call(
        "Beat",
        hpb.BeatRequest(heartbeat_id=heartbeat_id),
        SAFE_RETRY_ON,
        lambda response: response.heartbeat,
    )


def resolve_failure(
    notification_id: str, reason: str, validate_only: bool
) -> Call[pb.ResolveFailureRequest, pb.ResolveFailureResponse, t.Notification]:
    return Call(
        "ResolveFailure",
        pb.ResolveFailureRequest(
            notification_id=notification_id, reason=reason, validate_only=validate_only
        ),
        SAFE_RETRY_ON if validate_only else NO_RETRY,
        _notification,
    )
