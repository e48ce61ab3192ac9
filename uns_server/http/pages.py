"""HTML pages: Jinja2 templates shipped in the package, always autoescaped."""

from __future__ import annotations

from typing import Any

import jinja2
from aiohttp import web

_env = jinja2.Environment(
    loader=jinja2.PackageLoader("uns_server.http", "templates"),
    autoescape=True,  # every template, whatever its name: producer text is untrusted
    undefined=jinja2.StrictUndefined,
    enable_async=False,
)


def render(template: str, *, status: int = 200, **context: Any) -> web.Response:
    body = _env.get_template(template).render(**context)
    return web.Response(status=status, text=body, content_type="text/html", charset="utf-8")


def not_found() -> web.Response:
    """The one answer for every bad link: it tells nothing about why."""
    return render("not_found.html", status=404)
