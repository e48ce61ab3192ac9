"""The operator console under ``/console/`` (docs/console.md): server-rendered pages
over the same services and rules as the gRPC API, signed in with an operator key.

Transport only, like the rest of ``uns_server.http``: every decision is the services'.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from uns_server.domain.errors import UnsError
from uns_server.http.console import (
    admin,
    dead_letters,
    heartbeats,
    live,
    notifications,
    overview,
    people,
    windows,
)
from uns_server.http.console.context import Console
from uns_server.http.console.guard import action, page, same_origin
from uns_server.http.console.render import render
from uns_server.http.console.sessions import COOKIE

STATIC = Path(__file__).parent / "static"

__all__ = ["Console", "routes"]


def _safe_next(value: str | None) -> str:
    """Only a console path: never an open redirect."""
    if value and value.startswith("/console/") and not value.startswith("//"):
        parts = urlsplit(value)
        if not parts.scheme and not parts.netloc:
            return value
    return "/console/"


def routes(c: Console) -> list[web.AbstractRouteDef]:
    def p(handler: Callable[..., Awaitable[web.StreamResponse]]) -> Any:
        return page(c, partial(handler, c=c))

    def a(handler: Callable[..., Awaitable[web.StreamResponse]]) -> Any:
        return action(c, partial(handler, c=c))

    async def sign_in_page(request: web.Request) -> web.StreamResponse:
        return render(
            request,
            "sign_in.html",
            title="Sign in",
            next=_safe_next(request.query.get("next")),
            problem="",
        )

    async def sign_in(request: web.Request) -> web.StreamResponse:
        form: Any = await request.post()
        target = _safe_next(form.get("next"))
        if not same_origin(request, c.public_url()):
            return render(request, "refused.html", status=403, reason="Sign-in from elsewhere.")
        previous = request.cookies.get(COOKIE)
        if previous:  # a new sign-in replaces this browser's session, never adds one
            await c.sessions.sign_out(previous)
        try:
            session_id, session = await c.sessions.sign_in(
                str(form.get("api_key", "")), request.remote or ""
            )
        except UnsError as exc:
            return render(
                request,
                "sign_in.html",
                status={"UNAUTHENTICATED": 401, "RATE_LIMITED": 429}.get(exc.reason, 403),
                title="Sign in",
                next=target,
                problem=exc.message,
            )
        # Returned, not raised: the HTTP server rebuilds raised redirects without cookies.
        response = web.Response(status=303, headers={"Location": target})
        response.set_cookie(
            COOKIE,
            session_id,
            path="/console/",
            httponly=True,
            samesite="Strict",
            secure=c.secure,
        )
        c.audit(session, "sign_in")
        return response

    async def sign_out(request: web.Request, session: Any, form: Any) -> web.StreamResponse:
        await c.sessions.sign_out(request.cookies.get(COOKIE, ""))
        c.audit(session, "sign_out")
        response = web.Response(status=303, headers={"Location": "/console/sign-in"})
        response.del_cookie(COOKIE, path="/console/")
        return response

    async def root_redirect(_request: web.Request) -> web.StreamResponse:
        raise web.HTTPPermanentRedirect(location="/console/")

    return [
        web.get("/console", root_redirect, allow_head=False),
        web.get("/console/", p(overview.overview), allow_head=False),
        web.get("/console/sign-in", sign_in_page, allow_head=False),
        web.post("/console/sign-in", sign_in),
        web.post("/console/sign-out", action(c, sign_out)),
        web.get("/console/events", p(live.stream), allow_head=False),
        web.get("/console/notifications", p(notifications.list_page), allow_head=False),
        web.get("/console/notifications/{id}", p(notifications.detail), allow_head=False),
        web.post("/console/notifications/{id}/{action}", a(notifications.act)),
        web.get("/console/dead-letters", p(dead_letters.triage), allow_head=False),
        web.post("/console/dead-letters/preview", a(dead_letters.preview)),
        web.post("/console/dead-letters/apply", a(dead_letters.apply)),
        web.get("/console/policies", p(admin.policy_list), allow_head=False),
        web.get("/console/policies/{type}", p(admin.policy), allow_head=False),
        web.post("/console/policies/{type}/activate", a(admin.activate)),
        web.get("/console/people", p(people.people_page), allow_head=False),
        web.get("/console/windows", p(windows.windows_page), allow_head=False),
        web.get("/console/heartbeats", p(heartbeats.heartbeats_page), allow_head=False),
        web.get("/console/keys", p(admin.key_list), allow_head=False),
        web.post("/console/keys", a(admin.key_create)),
        web.post("/console/keys/{id}/revoke", a(admin.key_revoke)),
        web.static("/console/static", STATIC, append_version=False),
    ]
