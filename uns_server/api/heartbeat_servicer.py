"""``uns.v1.HeartbeatService``: protobuf in, one ``HeartbeatService`` call, protobuf out.

The operator role writes (Put, Delete); producers and operators read (Get, List) and
beat (a producer's cron job reports in with its own key).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import grpc
from google.protobuf import duration_pb2

from uns.v1 import heartbeat_service_pb2 as pb
from uns.v1 import heartbeat_service_pb2_grpc as pb_grpc
from uns_server.api import convert
from uns_server.api.handlers import unary
from uns_server.domain.enums import Role
from uns_server.domain.heartbeats import Heartbeat, HeartbeatState, build_heartbeat
from uns_server.services.auth import Authenticator, Principal
from uns_server.services.heartbeats import HeartbeatService

Ctx = grpc.aio.ServicerContext[Any, Any]
READERS = (Role.OPERATOR, Role.PRODUCER)
_STATES = {
    HeartbeatState.UP: pb.HEARTBEAT_STATE_UP,
    HeartbeatState.LATE: pb.HEARTBEAT_STATE_LATE,
    HeartbeatState.PAGING: pb.HEARTBEAT_STATE_PAGING,
}


def _period(d: duration_pb2.Duration, present: bool) -> timedelta | None:
    if not present:
        return None
    try:
        return d.ToTimedelta()
    except (ValueError, OverflowError):
        return timedelta(days=-1)  # refused by the builder as negative


def heartbeat_from_wire(h: pb.HeartbeatMonitor) -> Heartbeat:
    return build_heartbeat(
        h.heartbeat_id,
        h.notification_type,
        _period(h.interval, h.HasField("interval")),
        _period(h.grace, h.HasField("grace")),
        h.title,
        h.message,
    )


def _stamp(msg: Any, name: str, value: datetime | None) -> None:
    ts = convert.timestamp(value)
    if ts is not None:
        getattr(msg, name).CopyFrom(ts)


def spec_to_wire(h: Heartbeat) -> pb.HeartbeatMonitor:
    """What the operator puts (``uns-admin heartbeats put --target`` sends it)."""
    return pb.HeartbeatMonitor(
        heartbeat_id=h.heartbeat_id,
        notification_type=h.notification_type,
        interval=convert.duration(h.interval),
        grace=convert.duration(h.grace),
        title=h.title,
        message=h.message,
    )


def heartbeat_to_wire(h: Heartbeat, now: datetime) -> pb.HeartbeatMonitor:
    """A stored heartbeat as it stands at ``now``."""
    msg = spec_to_wire(h)
    msg.state = _STATES[h.state(now)]
    msg.notification_id = h.notification_id or ""
    msg.page_error = h.page_problem(now)
    msg.updated_by = h.updated_by
    _stamp(msg, "last_beat_time", h.last_beat_at)
    _stamp(msg, "deadline_time", h.deadline)
    _stamp(msg, "create_time", h.created_at)
    _stamp(msg, "update_time", h.updated_at)
    return msg


class HeartbeatServicer(pb_grpc.HeartbeatServiceServicer):
    def __init__(
        self, auth: Authenticator, heartbeats: HeartbeatService, clock: Callable[[], datetime]
    ) -> None:
        self.auth = auth
        self.heartbeats = heartbeats
        self._clock = clock

    def _wire(self, h: Heartbeat) -> pb.HeartbeatMonitor:
        return heartbeat_to_wire(h, self._clock())

    @unary(Role.OPERATOR)
    async def PutHeartbeat(
        self, request: pb.PutHeartbeatRequest, context: Ctx, principal: Principal
    ) -> pb.PutHeartbeatResponse:
        stored = await self.heartbeats.put(principal.name, heartbeat_from_wire(request.heartbeat))
        return pb.PutHeartbeatResponse(heartbeat=self._wire(stored))

    @unary(*READERS)
    async def GetHeartbeat(
        self, request: pb.GetHeartbeatRequest, context: Ctx, principal: Principal
    ) -> pb.GetHeartbeatResponse:
        found = await self.heartbeats.get(request.heartbeat_id)
        return pb.GetHeartbeatResponse(heartbeat=self._wire(found))

    @unary(*READERS)
    async def ListHeartbeats(
        self, request: pb.ListHeartbeatsRequest, context: Ctx, principal: Principal
    ) -> pb.ListHeartbeatsResponse:
        rows, token = await self.heartbeats.list(request.page_size, request.page_token)
        return pb.ListHeartbeatsResponse(
            heartbeats=[self._wire(h) for h in rows], next_page_token=token
        )

    @unary(Role.OPERATOR)
    async def DeleteHeartbeat(
        self, request: pb.DeleteHeartbeatRequest, context: Ctx, principal: Principal
    ) -> pb.DeleteHeartbeatResponse:
        gone = await self.heartbeats.delete(principal.name, request.heartbeat_id)
        return pb.DeleteHeartbeatResponse(heartbeat=self._wire(gone))

    @unary(*READERS)
    async def Beat(
        self, request: pb.BeatRequest, context: Ctx, principal: Principal
    ) -> pb.BeatResponse:
        beaten = await self.heartbeats.beat(request.heartbeat_id)
        return pb.BeatResponse(heartbeat=self._wire(beaten))
