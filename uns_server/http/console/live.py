"""Server-Sent Events: the live tail and a notification's live timeline.

Fed by the same in-process ``EventHub`` as WatchEvents (through ``Watch.stream``):
an idle console costs no queries, only its heartbeat comment every
``watch_heartbeat_seconds`` and, at most once every ``SESSION_RECHECK_SECONDS`` of the
clock, one primary-key read to end the stream when its session has ended (sign-out
elsewhere, expiry, a revoked key). The re-check is on time, before whatever the stream
writes next (an event or a heartbeat), so a busy stream ends as soon as an idle one.
``after`` (or the browser's ``Last-Event-ID`` on a reconnect) resumes gap-free after
the last event the page already shows.
"""

from __future__ import annotations

import json

from aiohttp import web

from uns_server.domain.enums import EventKind
from uns_server.domain.errors import InvalidRequest, ShuttingDown, TooManyStreams, UnsError
from uns_server.http.console.context import Console
from uns_server.http.console.notifications import NO_NAMES, summary
from uns_server.http.console.reading import Names, recipient_ids_in
from uns_server.http.console.sessions import COOKIE, Session
from uns_server.http.server import DEADLINE_KEY, SECURITY_HEADERS
from uns_server.services.watch import StreamHeartbeat

SESSION_RECHECK_SECONDS = 5.0
TAIL_KINDS = frozenset(k.value for k in EventKind)


async def _names(c: Console, payload: object) -> Names:
    """The people an event names (one primary-key read, only for such an event)."""
    ids = recipient_ids_in((), [payload])
    if not ids:
        return NO_NAMES
    async with c.store.read() as tx:
        return Names(await tx.people.recipients_by_id(ids))


async def stream(request: web.Request, session: Session, c: Console) -> web.StreamResponse:
    nid = request.query.get("notification_id", "")
    raw = request.headers.get("Last-Event-ID") or request.query.get("after", "0")
    try:
        after = int(raw)
        cursor = await c.watch.start_cursor(after if after > 0 else 0, replay_history=False)
    except (ValueError, UnsError):
        cursor = await c.watch.start_cursor(0, replay_history=False)
    response = web.StreamResponse(
        headers={
            **SECURITY_HEADERS,
            "Content-Type": "text/event-stream",
            "X-Accel-Buffering": "no",  # no proxy buffering of a live stream
        }
    )
    deadline = request.get(DEADLINE_KEY)
    if deadline is not None:
        deadline.reschedule(None)
    # The live tail's filters (``kind`` repeated, ``type``); unknown kinds are dropped.
    kinds = [k for k in request.query.getall("kind", []) if k in TAIL_KINDS]
    events = c.watch.stream(
        session.principal,
        cursor=cursor,
        notification_ids=[nid] if nid else [],
        kinds=kinds,
        notification_type=request.query.get("type", "").strip(),
    )
    try:
        first = await anext(events)
    except TooManyStreams as exc:
        return web.Response(status=429, text=exc.message)
    except InvalidRequest as exc:  # a filter the stream refuses (a NUL in ``type``)
        return web.Response(status=400, text=exc.message)
    await response.prepare(request)
    await response.write(b"retry: 3000\n\n")
    checked = c.clock()
    try:
        item = first
        while True:
            if (c.clock() - checked).total_seconds() >= SESSION_RECHECK_SECONDS:
                checked = c.clock()
                if await c.sessions.load(request.cookies.get(COOKIE), touch=False) is None:
                    break  # the browser reconnects, is refused, and says so
            if isinstance(item, StreamHeartbeat):
                await response.write(f": heartbeat {item.high_water_sequence}\n\n".encode())
            else:
                ev = item.event
                data = {
                    "sequence": ev.sequence,
                    "kind": ev.kind.value,
                    "notification_id": ev.notification_id,
                    "notification_type": ev.notification_type,
                    "at": ev.at.isoformat(),
                    "summary": summary(ev.kind, ev.payload, await _names(c, ev.payload)),
                }
                await response.write(
                    f"id: {ev.sequence}\nevent: uns\ndata: {json.dumps(data)}\n\n".encode()
                )
            item = await anext(events)
    except (ShuttingDown, ConnectionResetError, StopAsyncIteration):
        pass
    finally:
        close = getattr(events, "aclose", None)  # an async generator: release its stream
        if close is not None:
            await close()
    return response
