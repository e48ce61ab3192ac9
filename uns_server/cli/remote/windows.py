"""``uns-admin windows`` over ``uns.v1.MaintenanceService`` (the remote mode): the
``cli.windows.WindowBackend`` the shared commands call, answering with the same
``domain.maintenance`` values as the database mode."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC

import grpc

from uns.v1 import maintenance_service_pb2 as pb
from uns.v1 import maintenance_service_pb2_grpc as pb_grpc
from uns_clients import ClientConfig
from uns_server.api.maintenance_servicer import window_to_wire
from uns_server.cli.remote.connection import call
from uns_server.cli.windows import PAGE_SIZE
from uns_server.domain.maintenance import MaintenanceWindow


def _window(wire: pb.MaintenanceWindow) -> MaintenanceWindow:
    # Not ``window_from_wire``: what the server stored is shown as it is, unvalidated.
    return MaintenanceWindow(
        window_id=wire.window_id,
        start_time=wire.start_time.ToDatetime(tzinfo=UTC),
        end_time=wire.end_time.ToDatetime(tzinfo=UTC),
        notification_types=tuple(wire.notification_types),
        reason=wire.reason,
        updated_by=wire.updated_by,
        updated_at=(
            wire.update_time.ToDatetime(tzinfo=UTC) if wire.HasField("update_time") else None
        ),
    )


class RemoteWindows:
    def __init__(self, channel: grpc.aio.Channel, config: ClientConfig) -> None:
        self._stub = pb_grpc.MaintenanceServiceStub(channel)
        self._config = config

    async def put(self, window: MaintenanceWindow) -> MaintenanceWindow:
        wire = window_to_wire(replace(window, updated_by="", updated_at=None))
        request = pb.PutMaintenanceWindowRequest(window=wire)
        reply = await call(self._config, self._stub.PutMaintenanceWindow, request)
        return _window(reply.window)

    async def get(self, window_id: str) -> MaintenanceWindow:
        request = pb.GetMaintenanceWindowRequest(window_id=window_id)
        reply = await call(self._config, self._stub.GetMaintenanceWindow, request)
        return _window(reply.window)

    async def list_all(self) -> list[MaintenanceWindow]:
        out: list[MaintenanceWindow] = []
        token = ""
        while True:
            request = pb.ListMaintenanceWindowsRequest(page_size=PAGE_SIZE, page_token=token)
            reply = await call(self._config, self._stub.ListMaintenanceWindows, request)
            out += [_window(w) for w in reply.windows]
            token = reply.next_page_token
            if not token:
                return out

    async def delete(self, window_id: str) -> MaintenanceWindow:
        request = pb.DeleteMaintenanceWindowRequest(window_id=window_id)
        reply = await call(self._config, self._stub.DeleteMaintenanceWindow, request)
        return _window(reply.window)
