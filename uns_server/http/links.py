"""``GET /a/{token}`` shows an action page and changes nothing (mail scanners and link
previews fetch it); ``POST /a/{token}`` answers as the link's recipient.

The POST must come from the page itself: the form carries a nonce bound to the token
and to a ``SameSite=Strict`` cookie set with the page, and a browser's ``Origin`` must
be the public URL's. Success redirects to the page (POST/redirect/GET), which then
shows the outcome.

A link that acknowledges also offers "Snooze 30 min" while the answer is owed (whoever
may acknowledge may snooze, SPEC §7): the same form, ``action=snooze``.

``POST /a/{token}/answer`` is the same answer for machines: the button of a phone app
(ntfy's ``http`` action) that has no browser session. The token in the URL is the
credential, so there is no cookie or nonce to forge and nothing a cross-site request
could borrow (``&action=snooze`` on an acknowledge link snoozes instead); ``via``
names the channel type whose button it is (``MACHINE_VIAS``). It answers JSON: 200
with the ack state (a repeated press answers the same, changing nothing), 404 for a
link that does not verify, 409 when the answer is not taken.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from uns_server.domain.acks import sent_while_held
from uns_server.domain.enums import ACK_OWED, AckStatus
from uns_server.domain.errors import AckConflict, AckDeadlinePassed, AckNotPending, NotFound
from uns_server.domain.links import ACK, FORM_NONCE_MAX_AGE_SECONDS
from uns_server.http.pages import not_found, render
from uns_server.services.action_links import (
    MACHINE_VIAS,
    SNOOZE,
    VIA_LINK,
    ActionLinkService,
    LinkView,
)

log = logging.getLogger("uns.links")
COOKIE = "uns_form"
# Why a POST is not taken as an answer (``_unanswerable``), as the person reads it.
_REFUSED = {
    # A bare POST (a script, a mail scanner that follows forms, curl): nothing expired.
    "not_opened": "Open the link first: answers are given with the buttons on its page.",
    "other_browser": (
        "This page was opened in another browser, or this browser keeps no cookies: "
        "open the link here and answer on its page."
    ),
    "not_offered": "This link does not offer that answer: open the link and use its buttons.",
    "expired": "This page has expired: open the link again.",
}
_LABELS = {ACK: "Acknowledge", "dismiss": "Dismiss", SNOOZE: "Snooze 30 min"}
_OUTCOME_WORDS = {
    AckStatus.ACKED.value: "Acknowledged",
    AckStatus.DISMISSED.value: "Dismissed",
}


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S UTC") if value else ""


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _unanswerable(
    action: object, nonce: object, browser: str, view: LinkView, service: ActionLinkService
) -> str:
    """Why a POST cannot be taken as an answer (a key of ``_REFUSED``), or ""."""
    if not isinstance(nonce, str) or not nonce:
        return "not_opened"
    if not browser:
        return "other_browser"
    snoozes = action == SNOOZE and service.may_snooze(view)
    if not isinstance(action, str) or (action not in view.claims.actions and not snoozes):
        return "not_offered"
    if not service.signer.check_form_nonce(nonce, view.token, browser, service.now()):
        return "expired"
    return ""


def routes(service: ActionLinkService, public_url: Callable[[], str]) -> list[web.RouteDef]:
    def page(
        request: web.Request,
        view: LinkView,
        *,
        status: int = 200,
        problem: str = "",
    ) -> web.Response:
        row = view.notification
        doc = row.notification
        ack = row.ack_status
        now = service.now()
        outcome, bad = "", False
        pending = ack in ACK_OWED and row.deadline is not None and row.deadline > now
        # A person's message is held by their quiet hours, the others went out: the
        # ack has no deadline yet, and answers from those messages count.
        pending = pending or sent_while_held(row)
        if ack in _OUTCOME_WORDS:
            outcome = f"{_OUTCOME_WORDS[ack]} by {row.actor} at {_when(row.responded_at)}"
        elif (ack in ACK_OWED and not pending) or ack == AckStatus.TIMED_OUT.value:
            outcome, bad = f"Not answered in time (deadline {_when(row.deadline)}).", True
        elif ack is None and not pending:
            outcome = "This notification is not waiting for an answer."
        elif ack is not None and ack not in ACK_OWED:
            outcome, bad = f"No longer waiting for an answer ({ack.lower()}).", True
        elif ack == AckStatus.SNOOZED.value and pending:
            outcome = f"Snoozed until {_when(row.snoozed_until)}: the answer is still owed."
        browser = request.cookies.get(COOKIE) or secrets.token_urlsafe(24)
        offered = [*view.claims.actions, *([SNOOZE] if service.may_snooze(view) else [])]
        actions = [{"value": a, "label": _LABELS[a]} for a in offered] if pending else []
        response = render(
            "action.html",
            status=status,
            title=doc.title,
            message=doc.message,
            notification_type=row.notification_type,
            priority=doc.effective.priority.value,
            source=row.source,
            recipient=view.claims.recipient,
            deadline=_when(row.deadline) if pending else "",
            problem=problem,
            outcome=outcome,
            outcome_bad=bad,
            actions=actions,
            nonce=service.signer.form_nonce(view.token, browser, now),
        )
        if request.cookies.get(COOKIE) != browser:
            response.set_cookie(
                COOKIE,
                browser,
                path="/a/",
                max_age=FORM_NONCE_MAX_AGE_SECONDS,
                httponly=True,
                samesite="Strict",
                secure=public_url().startswith("https://"),
            )
        return response

    async def show(request: web.Request) -> web.Response:
        view = await service.view(request.match_info["token"])
        return not_found() if view is None else page(request, view)

    async def answer(request: web.Request) -> web.StreamResponse:
        token = request.match_info["token"]
        view = await service.view(token)
        if view is None:
            return not_found()
        origin = request.headers.get("Origin")
        if origin is not None and origin != _origin(public_url()):
            return render("refused.html", status=403, reason="This form was sent from elsewhere.")
        form: Any = await request.post()
        action, nonce = form.get("action"), form.get("nonce")
        browser = request.cookies.get(COOKIE, "")
        refused = _unanswerable(action, nonce, browser, view, service)
        if refused:
            log.info(
                "link answer refused",
                extra={"notification_id": view.claims.notification_id, "refused": refused},
            )
            return render("refused.html", status=403, reason=_REFUSED[refused], again=request.path)
        assert isinstance(action, str)
        extra = {
            "notification_id": view.claims.notification_id,
            "actor": view.claims.recipient,
            "via": VIA_LINK,
            "action": action,
        }
        try:
            if action == SNOOZE:
                await service.snooze(view)
                repeat = False
            else:
                _, repeat = await service.answer(view, action)
        except AckConflict:
            problem, outcome = "Someone else answered first.", "conflict"
        except AckDeadlinePassed:
            problem, outcome = "The deadline has passed: answers are no longer accepted.", "late"
        except (AckNotPending, NotFound):
            problem, outcome = "This notification is not waiting for an answer.", "not_pending"
        else:
            # As the provider answers are (``services.provider_answers``).
            log.info("answered from a link", extra={**extra, "repeat": repeat})
            raise web.HTTPSeeOther(location=request.path)
        log.info("link answer refused", extra={**extra, "refused": outcome})
        fresh = await service.view(token)
        return not_found() if fresh is None else page(request, fresh, status=409, problem=problem)

    async def machine_answer(request: web.Request) -> web.Response:
        view = await service.view(request.match_info["token"])
        if view is None:
            return web.json_response({"error": "no such link"}, status=404)
        via = request.query.get("via", "")
        if via not in MACHINE_VIAS or len(view.claims.actions) != 1:
            return web.json_response({"error": "this link is answered from its page"}, status=400)
        action = request.query.get("action") or view.claims.actions[0]
        if action not in (view.claims.actions[0], SNOOZE) or (
            action == SNOOZE and ACK not in view.claims.actions
        ):
            return web.json_response({"error": "this link does not offer that"}, status=400)
        try:
            if action == SNOOZE:
                row, repeat = await service.snooze(view, via=via), False
            else:
                row, repeat = await service.answer(view, action, via=via)
        except AckConflict:
            problem = "another answer came first"
        except AckDeadlinePassed:
            problem = "the deadline has passed"
        except (AckNotPending, NotFound):
            problem = "not waiting for an answer"
        else:
            return web.json_response(
                {
                    "notification_id": row.id,
                    "ack_state": row.ack_status,
                    "actor": row.actor,
                    "repeat": repeat,
                }
            )
        return web.json_response({"error": problem}, status=409)

    return [
        web.get("/a/{token}", show, allow_head=False),
        web.post("/a/{token}", answer),
        web.post("/a/{token}/answer", machine_answer),
    ]
