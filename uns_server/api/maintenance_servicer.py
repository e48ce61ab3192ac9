"""``uns.v1.MaintenanceService``: protobuf in, one ``MaintenanceService`` call,
protobuf out. Every RPC requires the operator role."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import grpc
from google.protobuf import timestamp_pb2

from uns.v1 import maintenance_service_pb2 as pb
from uns.v1 import maintenance_service_pb2_grpc as pb_grpc
from uns_server.api import convert
from uns_server.api.handlers import unary
from uns_server.domain.enums import Role
from uns_server.domain.maintenance import TYPES_MAX, MaintenanceWindow, build_window
from uns_server.services.auth import Authenticator, Principal
from uns_server.services.maintenance import MaintenanceService

Ctx = grpc.aio.ServicerContext[Any, Any]


def _time(ts: timestamp_pb2.Timestamp, present: bool) -> datetime | None:
    if not present:
        return None
    try:
        return ts.ToDatetime(tzinfo=UTC)
    except (ValueError, OverflowError):
        return datetime.max.replace(tzinfo=UTC)  # out of range: refused as such


def window_from_wire(w: pb.MaintenanceWindow) -> MaintenanceWindow:
    """Validated (INVALID_REQUEST with ``window.<field>`` violations). Past
    ``TYPES_MAX`` only one type more is read (to be refused)."""
    return build_window(
        w.window_id,
        _time(w.start_time, w.HasField("start_time")),
        _time(w.end_time, w.HasField("end_time")),
        list(w.notification_types[: TYPES_MAX + 1]),
        w.reason,
    )


def window_to_wire(w: MaintenanceWindow) -> pb.MaintenanceWindow:
    msg = pb.MaintenanceWindow(
        window_id=w.window_id,
        notification_types=list(w.notification_types),
        reason=w.reason,
        updated_by=w.updated_by,
    )
    msg.start_time.FromDatetime(w.start_time)
    msg.end_time.FromDatetime(w.end_time)
    updated = convert.timestamp(w.updated_at)
    if updated is not None:
        msg.update_time.CopyFrom(updated)
    return msg


class MaintenanceServicer(pb_grpc.MaintenanceServiceServicer):
    def __init__(self, auth: Authenticator, windows: MaintenanceService) -> None:
        self.auth = auth
        self.windows = windows

    @unary(Role.OPERATOR)
    async def PutMaintenanceWindow(
        self, request: pb.PutMaintenanceWindowRequest, context: Ctx, principal: Principal
    ) -> pb.PutMaintenanceWindowResponse:
        window = window_from_wire(request.window)
        stored = await self.windows.put(principal.name, window)
        return pb.PutMaintenanceWindowResponse(window=window_to_wire(stored))

    @unary(Role.OPERATOR)
    async def GetMaintenanceWindow(
        self, request: pb.GetMaintenanceWindowRequest, context: Ctx, principal: Principal
    ) -> pb.GetMaintenanceWindowResponse:
        found = await self.windows.get(request.window_id)
        return pb.GetMaintenanceWindowResponse(window=window_to_wire(found))

    @unary(Role.OPERATOR)
    async def ListMaintenanceWindows(
        self, request: pb.ListMaintenanceWindowsRequest, context: Ctx, principal: Principal
    ) -> pb.ListMaintenanceWindowsResponse:
        windows, token = await self.windows.list(request.page_size, request.page_token)
        return pb.ListMaintenanceWindowsResponse(
            windows=[window_to_wire(w) for w in windows], next_page_token=token
        )

    @unary(Role.OPERATOR)
    async def DeleteMaintenanceWindow(
        self, request: pb.DeleteMaintenanceWindowRequest, context: Ctx, principal: Principal
    ) -> pb.DeleteMaintenanceWindowResponse:
        found = await self.windows.delete(principal.name, request.window_id)
        return pb.DeleteMaintenanceWindowResponse(window=window_to_wire(found))
