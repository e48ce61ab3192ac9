"""Heartbeats (``/console/heartbeats``): each job that must report in, where it stands
(up, late, paging), its last beat, its deadline and the page its silence raised,
through the same service as HeartbeatService."""

from __future__ import annotations

from aiohttp import web

from uns_server.http.console.context import Console
from uns_server.http.console.render import render
from uns_server.http.console.sessions import Session

ROWS_MAX = 500  # the rest through uns-admin heartbeats list or ListHeartbeats


async def heartbeats_page(request: web.Request, session: Session, c: Console) -> web.StreamResponse:
    assert c.heartbeats is not None
    rows, more = await c.heartbeats.list(ROWS_MAX)
    now = c.clock()
    return render(
        request,
        "heartbeats.html",
        title="Heartbeats",
        heartbeats=[(h, h.state(now).value, h.page_problem(now)) for h in rows],
        capped=bool(more),
    )
