"""Console pages: Jinja2 templates from this package, always autoescaped.

Times are rendered as ``<time>`` in UTC (also in ``title``); ``static/console.js``
rewrites the text into the viewer's zone, so without script the page still reads.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import jinja2
from aiohttp import web
from markupsafe import Markup, escape

from uns_server.http.console.sessions import SESSION_KEY

# Scripts and styles only from our own files: no inline script, no inline style.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)


def when(value: datetime | str | None) -> Markup:
    if value is None or value == "":
        return Markup('<span class="muted">—</span>')
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return Markup(escape(value))
    utc = value.strftime("%Y-%m-%d %H:%M:%S UTC")
    iso = value.isoformat()
    return Markup(f'<time datetime="{escape(iso)}" title="{escape(utc)}">{escape(utc)}</time>')


def span(value: timedelta) -> str:
    """A length as people say it: "1 day 12 hours", "30 minutes" (a shift, a window)."""
    seconds = int(value.total_seconds())
    parts = []
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1)):
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count} {unit}{'' if count == 1 else 's'}")
    return " ".join(parts) or "0 seconds"


def result_notes(metadata: Any) -> list[str]:
    """A channel result's metadata as sentences: "the provider did not act on it", not
    ``provider_effect_possible=False``."""
    if not isinstance(metadata, dict):
        return []
    notes: list[str] = []
    for key, value in sorted(metadata.items()):
        if key == "provider_effect_possible":
            notes.append(
                "the provider may have acted on it" if value else "the provider did not act on it"
            )
        elif key == "http_status":
            notes.append(f"the provider answered HTTP {value}")
        elif key == "retry_after_seconds":
            notes.append(f"the provider asked to retry after {value} s")
        elif value not in (None, "", [], {}):
            shown = ", ".join(map(str, value)) if isinstance(value, list) else value
            notes.append(f"{key.replace('_', ' ')}: {shown}")
    return notes


_env = jinja2.Environment(
    loader=jinja2.PackageLoader("uns_server.http.console", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)
_env.filters["when"] = when
_env.filters["result_notes"] = result_notes
_env.filters["span"] = span


def render(
    request: web.Request, template: str, *, status: int = 200, **context: Any
) -> web.Response:
    session = request.get(SESSION_KEY)
    context.setdefault("title", "Refused" if status == 403 else "UNS")
    body = _env.get_template(template).render(
        session=session,
        csrf=session.csrf_token if session is not None else "",
        path=request.path,
        **context,
    )
    response = web.Response(status=status, text=body, content_type="text/html", charset="utf-8")
    response.headers["Content-Security-Policy"] = CSP
    return response
