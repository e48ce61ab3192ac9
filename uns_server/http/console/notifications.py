"""Notifications: the list (ListNotifications' filter language and paging), the detail
page (fields, effective policy, attempts, timeline, ack state) and its actions."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from uns_server.domain.enums import ACK_OWED, EventKind, Status
from uns_server.domain.errors import UnsError
from uns_server.domain.staged_rules import entry_text
from uns_server.domain.targets import people_sent
from uns_server.http.console.context import VIA, Console
from uns_server.http.console.reading import (
    Names,
    ack_words,
    recipient_ids_in,
    state_label,
    step_summary,
)
from uns_server.http.console.render import render
from uns_server.http.console.sessions import Session
from uns_server.http.console.triage import error_class, row_error
from uns_server.http.console.waiting import why_waiting
from uns_server.services.operations import validate_reason

PAGE_SIZE = 50
TIMELINE_MAX = 500
QUICK_FILTERS = (
    ("Dead letters", "state = FAILED AND dead_letter = true"),
    ("Acks pending", "ack_state = PENDING"),
    ("Pending", "state = PENDING"),
    ("Delivered", "state = DELIVERED"),
    ("Resolved failures", "state = FAILED AND dead_letter = false"),
)
ACTIONS = {
    "replay": "Replay",
    "resolve": "Resolve",
    "ack": "Acknowledge",
    "dismiss": "Dismiss",
    "withdraw": "Withdraw",
}


NO_NAMES = Names({})


def summary(kind: str, payload: Any, names: Names = NO_NAMES) -> str:
    """One line about an event for the timeline and the live tail; people by name."""
    p = payload if isinstance(payload, dict) else {}
    if kind in (EventKind.REMINDER_SENT, EventKind.ESCALATED):
        return step_summary(kind, p, names)
    # A person's own message names them: ``mail to Bob Okafor (bob)``.
    rid = p.get("recipient_id")
    where = str(p.get("channel", "?")) + (f" to {names.text(rid)}" if isinstance(rid, str) else "")
    if kind == EventKind.CHANNEL_ATTEMPT_RESULT:
        ok = "delivered" if p.get("success") else f"failed: {p.get('error') or 'unknown error'}"
        meta = p.get("metadata")
        failed = meta.get("template_error") if isinstance(meta, dict) else None
        # The policy's template did not render: the raw title and message were sent.
        raw = f"; template failed, raw text sent: {failed}" if failed else ""
        return f"{where} {ok} (attempt {p.get('attempt', '?')}){raw}"
    if kind == EventKind.DELIVERY_RESULT:
        dl = ", dead letter" if p.get("dead_letter") else ""
        return f"{p.get('status', '?')}{dl}"
    if kind in (EventKind.ACKED, EventKind.DISMISSED, EventKind.TIMED_OUT):
        via = f" via {p['via']}" if p.get("via") else ""
        return f"by {names.actor_text(p.get('actor'))}{via}"
    if kind in (EventKind.REPLAY_REQUESTED, EventKind.FAILURE_RESOLVED):
        via = f" via {p['via']}" if p.get("via") else ""
        reason = f": {p['reason']}" if p.get("reason") else ""
        return f"by {p.get('actor', '?')}{via}{reason}"
    if kind == EventKind.CHANNEL_ATTEMPT_STARTED:
        return f"{where} (attempt {p.get('attempt', '?')})"
    if kind == EventKind.ATTEMPT_STARTED:
        return f"attempt {p.get('attempt', '?')}, cycle {p.get('cycle', '?')}"
    return ""


async def list_page(request: web.Request, session: Session, c: Console) -> web.StreamResponse:
    filter_text = request.query.get("filter", "")
    token = request.query.get("page_token", "")
    raw_size = request.query.get("page_size", "")
    size = int(raw_size) if raw_size.isdigit() else PAGE_SIZE  # the service caps it
    rows: list[Any] = []
    next_token, problem = "", ""
    try:
        rows, next_token = await c.queries.list(session.principal, filter_text, size, token)
    except UnsError as exc:
        problem = exc.message
    return render(
        request,
        "notifications.html",
        status=400 if problem else 200,
        title="Notifications",
        rows=rows,
        filter_text=filter_text,
        next_token=next_token,
        page_size=size,
        first_page=not token,
        problem=problem,
        quick_filters=QUICK_FILTERS,
        state_of=lambda r: state_label(r.status, r.dead_letter, r.ack_status),
        ack_words=ack_words,
    )


async def detail(
    request: web.Request,
    session: Session,
    c: Console,
    *,
    problem: str = "",
    status: int = 200,
) -> web.StreamResponse:
    nid = request.match_info["id"]
    try:
        row = await c.queries.get(session.principal, nid)
    except UnsError as exc:
        return render(request, "error.html", status=404, title="Not found", reason=exc.message)
    async with c.store.read() as tx:
        high_water = await tx.events.high_water()
        timeline = await tx.console.notification_events(row.id, TIMELINE_MAX)
        ack_records = await tx.audit.ack_records(row.id, offset=0, limit=100)
        asked = people_sent(row.outcome, row.provider_refs or {})
        ids = recipient_ids_in(
            [row.actor, *(a.acked_by for a in ack_records)], [e.payload for e in timeline]
        )
        names = Names(await tx.people.recipients_by_id(ids | {p.recipient_id for p in asked}))
    attempts = [e for e in timeline if e.kind == EventKind.CHANNEL_ATTEMPT_RESULT]
    doc = row.notification
    dead = row.status == Status.FAILED and row.dead_letter
    pending_ack = row.ack_status in ACK_OWED
    actions = [a for a, on in (("replay", dead), ("resolve", dead)) if on]
    if pending_ack:
        actions += ["ack", "dismiss"]
    if row.status == Status.PENDING or dead or pending_ack:
        actions.append("withdraw")
    waiting = why_waiting(row, c.channels, c.clock())
    return render(
        request,
        "notification.html",
        status=status,
        title=doc.title or row.id,
        row=row,
        doc=doc,
        effective=doc.effective.to_json(),  # shown as the stored JSON
        timeline=[(e, summary(e.kind, e.payload, names)) for e in timeline],
        state=state_label(row.status, row.dead_letter, row.ack_status),
        ack_words=ack_words(row.ack_status),
        names=names,
        endpoints=c.endpoints,
        providers=[
            (ch, c.endpoints[ch])
            for ch in dict.fromkeys(str(e.payload.get("channel")) for e in attempts)
            if ch in c.endpoints
        ],
        attempts=attempts,
        ack_records=ack_records,
        error_class=error_class(row_error(row)) if row.status == Status.FAILED else "",
        actions=[(a, ACTIONS[a]) for a in actions],
        waiting=waiting,
        people=asked,
        # Each person's staged rules (SPEC §7), in words: "sms after 2m: pending".
        staged={
            p.recipient_id: [
                entry_text(e, row.status == Status.PENDING or pending_ack) for e in p.staged
            ]
            for p in asked
        },
        # The live timeline resumes after the last event shown (sequences are allocated
        # in commit order, so nothing of this notification's can fall in between).
        after=max((e.sequence for e in timeline), default=high_water),
        problem=problem,
        done=request.query.get("done", ""),
    )


async def act(request: web.Request, session: Session, form: Any, c: Console) -> web.StreamResponse:
    """Replay, resolve, acknowledge, dismiss or withdraw one notification, as the
    operator."""
    nid = request.match_info["id"]
    what = request.match_info["action"]
    reason = str(form.get("reason", "")).strip()
    if what not in ACTIONS:
        raise web.HTTPNotFound()
    if not reason or form.get("confirm") != "yes":
        return await detail(
            request,
            session,
            c,
            status=400,
            problem="Give a reason and tick the confirmation box to go ahead.",
        )
    try:
        validate_reason(reason)
        if what == "replay":
            await c.operations.replay(session.principal, nid, reason, via=VIA)
        elif what == "resolve":
            await c.operations.resolve_failure(session.principal, nid, reason, via=VIA)
        elif what == "withdraw":
            await c.withdrawals.withdraw(session.principal, nid, reason)
        else:
            row = await c.queries.get(session.principal, nid)
            await c.acks.answer(
                row.id,
                actor=session.principal.name,
                via=VIA,
                dismiss=what == "dismiss",
                metadata={"reason": reason},
            )
    except UnsError as exc:
        return await detail(request, session, c, status=409, problem=f"{exc.reason}: {exc.message}")
    c.audit(session, what, notification_id=nid, reason=reason)
    raise web.HTTPSeeOther(location=f"/console/notifications/{nid}?done={what}")
