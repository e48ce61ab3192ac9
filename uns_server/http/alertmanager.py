"""``POST /integrations/alertmanager``: Alertmanager's (and Grafana's) webhook as
obligations (SPEC §7 "Alerts in").

The key is a producer's, sent as Alertmanager's ``http_config.authorization`` sends it
(``Authorization: Bearer KEY``). Like JSON over HTTP (``http.connect``), the work is the
gRPC methods themselves over the bridge's loopback channel, with the key forwarded:
authentication, roles, tenancy, request budgets, validation, idempotency and dedup are
the gRPC path's, not a copy. The key is checked first, by the batch below, sent even
when no alert fires. A refusal that is not about one alert (no key, a key that is not a
producer's: 401, 403) or that says "not now" (a spent budget, storage unavailable: 429,
503) answers the whole request as the Connect error it is: Alertmanager sends the group
again at its next ``group_interval``, and whatever was done already replays.

- The firing alerts go in **one** ``BatchSendNotifications`` (one budget charge of one
  token each, the batch's group commit), each its own result. An alert re-sent every
  ``repeat_interval`` is an idempotent replay; one whose annotations changed since
  (``{{ $value }}`` in a description) is answered IDEMPOTENCY_CONFLICT by the batch,
  which here is a replay too: it is the same page, and the notification keeps the text
  it was accepted with.
- A resolved alert withdraws the notification its firing created, found by the same
  idempotency key (``fingerprint`` and ``startsAt``: that episode, never an earlier or
  later one of the same alert, which the dedup key would also match): ``Simulate`` of
  that send names it (``existing_notification_id``), ``WithdrawNotification`` withdraws
  it with the reason ``resolved at source`` (reminders stop, sent messages are closed).
  One with nothing to withdraw (never accepted, already settled) is reported
  ``withdrawn: false`` with a note, not as an error. Each costs two calls (two tokens).

The answer is 200 with one result per alert, in order. A body that is not JSON or not a
version-4 (Grafana: 1) payload is 400, INVALID_REQUEST naming the field.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from aiohttp import web
from google.rpc import error_details_pb2, status_pb2

from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t
from uns_server.domain.alert_payloads import (
    FIRING,
    RESOLVED_REASON,
    SOURCE,
    Alert,
    AlertSend,
    MalformedAlerts,
    parse_webhook,
)
from uns_server.http.connect import Bridge
from uns_server.http.connect_wire import DOMAIN, Refusal

log = logging.getLogger("uns.alertmanager")

PATH = "/integrations/alertmanager"
_SERVICE = "/uns.v1.NotificationService/"
# BatchSendNotifications' own limit (SPEC §6 Batches); Alertmanager's max_alerts caps a
# group below it.
ALERTS_MAX = 1000
_CODES = {code.value[0]: code for code in grpc.StatusCode}
# Refusals that concern the caller, not the alert, or say "not now" (a spent budget,
# storage unavailable): the whole request is answered with it, so that Alertmanager
# sends the group again later (it does after a failed notification, at the next
# group_interval), and what was done already replays.
_WHOLE = frozenset(
    {
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
    }
)
NOTHING_ACCEPTED = "nothing to withdraw: no notification was accepted for this alert"


@dataclass
class _Result:
    alert: Alert
    answer: dict[str, Any] = field(default_factory=dict)

    def json(self) -> dict[str, Any]:
        head = {"fingerprint": self.alert.fingerprint, "status": self.alert.status}
        return {**head, **self.answer}


def routes(bridge: Bridge) -> list[web.RouteDef]:
    async def receive(request: web.Request) -> web.StreamResponse:
        try:
            return await _receive(bridge, request)
        except Refusal as refusal:
            return refusal.response()

    return [web.post(PATH, receive)]


async def _receive(bridge: Bridge, request: web.Request) -> web.StreamResponse:
    body = await bridge.body(request)
    try:
        document = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise Refusal.invalid("the body is not JSON", field="body") from exc
    try:
        alerts = parse_webhook(document, request.query.get("type", "").strip())
    except MalformedAlerts as exc:
        raise _invalid(str(exc), [(p.field, p.description) for p in exc.problems]) from exc
    if len(alerts) > ALERTS_MAX:
        raise Refusal.invalid(
            f"alerts: {len(alerts)} alerts, at most {ALERTS_MAX} in one payload", field="alerts"
        )
    results = [_Result(a) for a in alerts]
    for result in results:
        problem = result.alert.problem
        if problem is not None:
            result.answer["error"] = _error(
                _invalid(problem.message, [(problem.field, problem.description)])
            )
    firing = [r for r in results if r.alert.send and r.alert.status == FIRING]
    # Always called, with no request if none fires: the key and its role are checked
    # (an empty batch costs no token) before anything else is done or answered.
    await _fire(bridge, request, firing)
    for result in results:
        if result.alert.send and result.alert.status != FIRING:
            await _resolve(bridge, request, result, result.alert.send)
    answers = [r.json() for r in results]
    log.info(
        "alertmanager webhook",
        extra={
            "alerts": len(answers),
            "accepted": sum("notificationId" in a and a["status"] == FIRING for a in answers),
            "withdrawn": sum(bool(a.get("withdrawn")) for a in answers),
            "errors": sum("error" in a for a in answers),
        },
    )
    return web.json_response({"results": answers})


def _send(send: AlertSend) -> pb.SendNotificationRequest:
    request = pb.SendNotificationRequest(
        notification_type=send.notification_type,
        intent=t.NOTIFICATION_INTENT_WARNING,
        title=send.title,
        message=send.message,
        source=SOURCE,
        idempotency_key=send.idempotency_key,
        dedup_key=send.dedup_key,
    )
    request.metadata.update(dict(send.metadata))
    return request


async def _fire(bridge: Bridge, request: web.Request, firing: Sequence[_Result]) -> None:
    batch = pb.BatchSendNotificationsRequest(
        requests=[_send(r.alert.send) for r in firing if r.alert.send]
    )
    answer = pb.BatchSendNotificationsResponse.FromString(
        await bridge.invoke(_SERVICE + "BatchSendNotifications", batch, request)
    )
    for result, item in zip(firing, answer.results, strict=True):
        if item.HasField("response"):
            sent = item.response
            result.answer.update(
                notificationId=sent.notification_id,
                idempotentReplay=sent.idempotent_replay,
                state=t.NotificationState.Name(sent.state),
            )
            continue
        refusal = _from_status(item.error)
        if refusal.code in _WHOLE:
            raise refusal
        existing = _conflicting(refusal)
        if existing:
            result.answer.update(
                notificationId=existing,
                idempotentReplay=True,
                note="the alert's text changed since it was accepted; the notification "
                "keeps the text it was accepted with",
            )
        else:
            result.answer["error"] = _error(refusal)


async def _resolve(bridge: Bridge, request: web.Request, result: _Result, send: AlertSend) -> None:
    try:
        simulated = pb.SimulateResponse.FromString(
            await bridge.invoke(
                _SERVICE + "Simulate", pb.SimulateRequest(request=_send(send)), request
            )
        )
        notification_id = simulated.existing_notification_id
        if not notification_id:
            result.answer.update(withdrawn=False, note=NOTHING_ACCEPTED)
            return
        result.answer["notificationId"] = notification_id
        withdraw = pb.WithdrawNotificationRequest(
            notification_id=notification_id, reason=RESOLVED_REASON
        )
        answer = pb.WithdrawNotificationResponse.FromString(
            await bridge.invoke(_SERVICE + "WithdrawNotification", withdraw, request)
        )
    except Refusal as refusal:
        if refusal.code in _WHOLE:
            raise
        if _reason(refusal) == "NOT_WITHDRAWABLE":
            result.answer.update(withdrawn=False, note=f"nothing to withdraw: {refusal.message}")
        else:
            result.answer["error"] = _error(refusal)
        return
    notification = answer.notification
    result.answer.update(
        withdrawn=True,
        state=t.NotificationState.Name(notification.state),
        ackState=t.AckState.Name(notification.ack_state),
    )


def _invalid(message: str, violations: Sequence[tuple[str, str]]) -> Refusal:
    """INVALID_REQUEST naming every field (``fields`` comma-separated, as the server's)."""
    fields = ",".join(field for field, _ in violations)
    info = error_details_pb2.ErrorInfo(
        reason="INVALID_REQUEST", domain=DOMAIN, metadata={"fields": fields}
    )
    bad = error_details_pb2.BadRequest(
        field_violations=[
            error_details_pb2.BadRequest.FieldViolation(field=field, description=description)
            for field, description in violations
        ]
    )
    return Refusal(grpc.StatusCode.INVALID_ARGUMENT, message, [info, bad])


def _from_status(status: status_pb2.Status) -> Refusal:
    code = _CODES.get(status.code, grpc.StatusCode.UNKNOWN)
    return Refusal(code, status.message, list(status.details))


def _info(refusal: Refusal) -> dict[str, Any]:
    for detail in refusal.body()["details"]:
        if detail["type"] == "google.rpc.ErrorInfo":
            info: dict[str, Any] = detail.get("debug", {})
            return info
    return {}


def _reason(refusal: Refusal) -> str:
    return str(_info(refusal).get("reason", ""))


def _conflicting(refusal: Refusal) -> str:
    """The notification an IDEMPOTENCY_CONFLICT names ("" for another refusal)."""
    if _reason(refusal) != "IDEMPOTENCY_CONFLICT":
        return ""
    return str(_info(refusal).get("metadata", {}).get("notification_id", ""))


def _error(refusal: Refusal) -> dict[str, Any]:
    """The refusal's Connect error JSON, with its ErrorInfo reason beside the code."""
    body = refusal.body()
    return {"code": body["code"], "reason": _reason(refusal), **body}
