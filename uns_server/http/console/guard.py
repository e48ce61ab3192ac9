"""Sessions and CSRF for every console route.

Pages need a live session (else a redirect to sign-in). State-changing requests need
one too (else 403, never a redirect that would replay the POST), plus the session's
synchronizer token in the form and, from a browser, an ``Origin`` of this site.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote, urlsplit

from aiohttp import web

from uns_server.http.console.context import Console
from uns_server.http.console.render import render
from uns_server.http.console.sessions import COOKIE, SESSION_KEY, Session

PageHandler = Callable[[web.Request, Session], Awaitable[web.StreamResponse]]
ActionHandler = Callable[[web.Request, Session, Any], Awaitable[web.StreamResponse]]
SIGN_IN = "/console/sign-in"


def same_origin(request: web.Request, public_url: str) -> bool:
    """No ``Origin`` (not a browser, or an old one: the token still guards) or the
    public URL's origin or the host this request was sent to."""
    origin = request.headers.get("Origin")
    if origin is None:
        return True
    parts = urlsplit(public_url)
    if origin == f"{parts.scheme}://{parts.netloc}":
        return True
    return urlsplit(origin).netloc == request.host and origin != "null"


def page(console: Console, handler: PageHandler) -> Callable[[web.Request], Awaitable[Any]]:
    async def wrapped(request: web.Request) -> web.StreamResponse:
        session = await console.sessions.load(request.cookies.get(COOKIE))
        if session is None:
            target = request.path_qs
            raise web.HTTPSeeOther(location=f"{SIGN_IN}?next={quote(target, safe='')}")
        request[SESSION_KEY] = session
        return await handler(request, session)

    return wrapped


def action(console: Console, handler: ActionHandler) -> Callable[[web.Request], Awaitable[Any]]:
    async def wrapped(request: web.Request) -> web.StreamResponse:
        session = await console.sessions.load(request.cookies.get(COOKIE))
        if session is None:
            return render(
                request,
                "refused.html",
                status=403,
                reason="Your session has ended. Sign in again, then retry.",
            )
        request[SESSION_KEY] = session
        form = await request.post()
        token = form.get("csrf")
        if not same_origin(request, console.public_url()) or not session.csrf_ok(
            token if isinstance(token, str) else None
        ):
            return render(
                request,
                "refused.html",
                status=403,
                reason="This form was not sent from this console page (CSRF check failed). "
                "Reload the page and try again.",
            )
        return await handler(request, session, form)

    return wrapped
