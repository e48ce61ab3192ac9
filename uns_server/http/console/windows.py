"""Maintenance windows (``/console/windows``): each window, whether it is open now,
and the latest changes with their operators, through the same service as
MaintenanceService. Read-only: windows are put with ``uns-admin windows`` or the API."""

from __future__ import annotations

from aiohttp import web

from uns_server.http.console.context import Console
from uns_server.http.console.render import render
from uns_server.http.console.sessions import Session

ROWS_MAX = 500
CHANGES_MAX = 50


async def windows_page(request: web.Request, session: Session, c: Console) -> web.StreamResponse:
    assert c.maintenance is not None
    windows, more = await c.maintenance.list(ROWS_MAX)
    changes = await c.maintenance.changes(CHANGES_MAX)
    now = c.clock()
    return render(
        request,
        "windows.html",
        title="Maintenance windows",
        windows=windows,
        capped=bool(more),
        changes=changes,
        now=now,
    )
