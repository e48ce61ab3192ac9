"""Dead-letter triage: buckets *needs action* (FAILED + dead_letter) and *resolved*,
grouped by notification type or error class; bulk replay or resolve of a selection or
a whole group, previewed first with the server's ``validate_only``.

A bucket shows its newest ``BUCKET_MAX`` rows (one indexed, bounded read); a bulk
action takes at most ``BULK_MAX`` notifications, and applies exactly the ones its
preview accepted (anything that changed since is refused again, by the same rules).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Any

from aiohttp import web

from uns_server.domain.errors import UnsError
from uns_server.domain.records import FailedSummary
from uns_server.domain.validation import validate_notification_id
from uns_server.http.console.context import VIA, Console
from uns_server.http.console.overview import channel_health, health_text
from uns_server.http.console.render import render
from uns_server.http.console.sessions import Session
from uns_server.http.console.triage import error_class, group_by, row_error
from uns_server.http.server import DEADLINE_KEY
from uns_server.services.operations import validate_reason


def _allow_bulk_time(request: web.Request) -> None:
    deadline = request.get(DEADLINE_KEY)
    if deadline is not None:
        deadline.reschedule(asyncio.get_running_loop().time() + BULK_SECONDS)


BUCKET_MAX = 500
BULK_MAX = 500
# A bulk action is up to BULK_MAX transactions: more time than one page, bounded still
# (stopping half-way would leave the operator guessing what was done).
BULK_SECONDS = 120.0
BUCKETS = {"needs-action": True, "resolved": False}
OPS = {"replay": "Replay", "resolve": "Resolve"}


@dataclass(frozen=True)
class Checked:
    notification_id: str
    ok: bool
    reason: str = ""
    message: str = ""
    title: str = ""
    channels: tuple[str, ...] = ()


async def _bucket(c: Console, bucket: str) -> list[FailedSummary]:
    async with c.store.read() as tx:
        return await tx.console.failed(dead_letter=BUCKETS[bucket], limit=BUCKET_MAX)


async def triage(request: web.Request, session: Session, c: Console) -> web.StreamResponse:
    bucket = request.query.get("bucket", "needs-action")
    by = request.query.get("by", "type")
    if bucket not in BUCKETS or by not in ("type", "error"):
        raise web.HTTPNotFound()
    rows = await _bucket(c, bucket)
    groups = group_by(rows, by)
    by_id = {r.id: r for r in rows}
    health = await channel_health(c)
    return render(
        request,
        "dead_letters.html",
        title="Dead letters",
        bucket=bucket,
        by=by,
        groups=[(g, [by_id[i] for i in g.ids]) for g in groups],
        total=len(rows),
        capped=len(rows) >= BUCKET_MAX,
        bucket_max=BUCKET_MAX,
        error_of=lambda r: error_class(row_error(r)),
        health_of=lambda name: health_text(name, health, c.channels, c.endpoints),
        actionable=bucket == "needs-action",
    )


async def _check(c: Console, session: Session, op: str, ids: list[str]) -> list[Checked]:
    checked = []
    for nid in ids:
        try:
            if op == "replay":
                await c.operations.replay(session.principal, nid, validate_only=True)
            else:
                await c.operations.resolve_failure(session.principal, nid, validate_only=True)
        except UnsError as exc:
            checked.append(Checked(nid, False, exc.reason, exc.message))
        else:
            checked.append(Checked(nid, True))
    return checked


async def _targets(c: Console, form: Any) -> tuple[str, list[str], str]:
    """(op, ids, what was chosen) from the triage form: a whole group's button, or
    the ticked rows with a selection button."""
    bucket = str(form.get("bucket", "needs-action"))
    by = str(form.get("by", "type"))
    for op in OPS:
        key = form.get(f"group_{op}")
        if isinstance(key, str) and bucket in BUCKETS and by in ("type", "error"):
            groups = group_by(await _bucket(c, bucket), by)
            ids = next((g.ids for g in groups if g.key == key), [])
            kind = "type" if by == "type" else "error class"
            return op, ids, f"the whole group with {kind} “{key}”"
    op = str(form.get("op", ""))
    ids = [str(i) for i in form.getall("id", [])]
    return op, ids, "the selected notifications"


async def preview(
    request: web.Request, session: Session, form: Any, c: Console
) -> web.StreamResponse:
    op, ids, chosen = await _targets(c, form)
    if op not in OPS:
        raise web.HTTPNotFound()
    ids = list(dict.fromkeys(ids))
    problem = ""
    if not ids:
        problem = "Nothing selected: tick some notifications or use a group's button."
    elif len(ids) > BULK_MAX:
        problem = f"At most {BULK_MAX} notifications per bulk action ({len(ids)} chosen)."
    _allow_bulk_time(request)
    checked = [] if problem else await _check(c, session, op, ids)
    if checked:
        checked = await _described(c, checked)
    health = await channel_health(c)
    return render(
        request,
        "bulk_preview.html",
        status=400 if problem else 200,
        title=f"Preview: {OPS[op].lower()}",
        op=op,
        op_label=OPS[op],
        chosen=chosen,
        problem=problem,
        accepted=[x for x in checked if x.ok],
        refused=[x for x in checked if not x.ok],
        health_of=lambda name: health_text(name, health, c.channels, c.endpoints),
    )


async def _described(c: Console, checked: list[Checked]) -> list[Checked]:
    """Each with its title and channels, from the dead-letter buckets' rows (what the
    triage page listed them from)."""
    rows = {r.id: r for b in BUCKETS for r in await _bucket(c, b)}
    return [
        replace(x, title=rows[x.notification_id].title, channels=rows[x.notification_id].channels)
        if x.notification_id in rows
        else x
        for x in checked
    ]


async def apply(
    request: web.Request, session: Session, form: Any, c: Console
) -> web.StreamResponse:
    op = str(form.get("op", ""))
    if op not in OPS:
        raise web.HTTPNotFound()
    ids = list(dict.fromkeys(str(i) for i in form.getall("id", [])))[:BULK_MAX]
    reason = str(form.get("reason", "")).strip()
    if not reason or form.get("confirm") != "yes" or not ids:
        return render(
            request,
            "error.html",
            status=400,
            title="Not applied",
            reason="Give a reason and tick the confirmation box; nothing was changed.",
        )
    try:
        validate_reason(reason)
    except UnsError as exc:
        return render(request, "error.html", status=400, title="Not applied", reason=exc.message)
    _allow_bulk_time(request)
    results = []
    for nid in ids:
        try:
            validate_notification_id(nid)
            if op == "replay":
                await c.operations.replay(session.principal, nid, reason, via=VIA)
            else:
                await c.operations.resolve_failure(session.principal, nid, reason, via=VIA)
        except UnsError as exc:
            results.append(Checked(nid, False, exc.reason, exc.message))
        else:
            c.audit(session, op, notification_id=nid, reason=reason, bulk=True)
            results.append(Checked(nid, True))
    return render(
        request,
        "bulk_done.html",
        title=f"{OPS[op]}: done",
        op_label=OPS[op],
        done=[x for x in results if x.ok],
        refused=[x for x in results if not x.ok],
    )
