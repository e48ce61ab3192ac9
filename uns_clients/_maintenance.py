"""The ``Call`` builders of ``uns.v1.MaintenanceService`` (maintenance windows;
operator role), run by ``AsyncClient`` and ``Client`` like those of ``_calls``.
Puts (by id) and reads retry UNAVAILABLE; a delete does not (a repeat after a lost
answer would report NOT_FOUND)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from uns.v1 import maintenance_service_pb2 as mpb
from uns_clients._calls import Call
from uns_clients._retry import NO_RETRY, SAFE_RETRY_ON

SERVICE = "maintenance"
PAGE_SIZE = 1000  # the server's most per page


def _window(
    response: mpb.PutMaintenanceWindowResponse
    | mpb.GetMaintenanceWindowResponse
    | mpb.DeleteMaintenanceWindowResponse,
) -> mpb.MaintenanceWindow:
    return response.window


def _same(response: mpb.ListMaintenanceWindowsResponse) -> mpb.ListMaintenanceWindowsResponse:
    return response


def put(
    window_id: str,
    start_time: datetime,
    end_time: datetime,
    notification_types: Iterable[str],
    reason: str,
) -> Call[mpb.PutMaintenanceWindowRequest, mpb.PutMaintenanceWindowResponse, mpb.MaintenanceWindow]:
    window = mpb.MaintenanceWindow(
        window_id=window_id, notification_types=list(notification_types), reason=reason
    )
    window.start_time.FromDatetime(start_time)
    window.end_time.FromDatetime(end_time)
    request = mpb.PutMaintenanceWindowRequest(window=window)
    return Call("PutMaintenanceWindow", request, SAFE_RETRY_ON, _window, service=SERVICE)


def get(
    window_id: str,
) -> Call[mpb.GetMaintenanceWindowRequest, mpb.GetMaintenanceWindowResponse, mpb.MaintenanceWindow]:
    request = mpb.GetMaintenanceWindowRequest(window_id=window_id)
    return Call("GetMaintenanceWindow", request, SAFE_RETRY_ON, _window, service=SERVICE)


def list_page(
    page_size: int, page_token: str
) -> Call[
    mpb.ListMaintenanceWindowsRequest,
    mpb.ListMaintenanceWindowsResponse,
    mpb.ListMaintenanceWindowsResponse,
]:
    request = mpb.ListMaintenanceWindowsRequest(page_size=page_size, page_token=page_token)
    return Call("ListMaintenanceWindows", request, SAFE_RETRY_ON, _same, service=SERVICE)


def delete(
    window_id: str,
) -> Call[
    mpb.DeleteMaintenanceWindowRequest, mpb.DeleteMaintenanceWindowResponse, mpb.MaintenanceWindow
]:
    request = mpb.DeleteMaintenanceWindowRequest(window_id=window_id)
    return Call("DeleteMaintenanceWindow", request, NO_RETRY, _window, service=SERVICE)
