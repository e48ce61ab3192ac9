"""Message templates (SPEC §7): what a message says, per channel type and language.

``PolicySpec.templates`` rewrite the title and the body of the message a channel
sends: Jinja2 in a sandbox (``SandboxedEnvironment``, ``StrictUndefined``: a
misspelled variable is an error, not an empty string) over the notification and the
person it is for. Compiled when the revision is written (a syntax error is
INVALID_REQUEST on ``spec.templates[i].title`` / ``.body``), frozen with the
notification's effective policy, rendered by :func:`render_message` each time a
message is built (delivery, reminder, escalation step; Simulate's preview).

Which template: the most specific for the channel type and the person's locale, in
this order (``domain.locales.fallbacks``: ``fr-CA`` -> ``fr`` -> any)::

    (channel type, fr-CA) (channel type, fr) (channel type, any)
    (any type, fr-CA)     (any type, fr)     (any type, any)

A render that fails (an undefined variable, a filter given nonsense, a sandbox
refusal such as ``{{ ''.__class__ }}``, output or work over the bounds below) sends
the raw title and message instead, and says why (``Rendered.error``; the attempt
records it as ``metadata.template_error``). Nothing of Python's insides is rendered:
the sandbox refuses the attribute, and the whole render is discarded.

Bounds, so that an operator's template cannot hold a dispatcher: ``range`` at most
``RANGE_MAX`` items, ``*`` and ``**`` refused past ``PRODUCT_MAX`` items or digits,
the output cut off past ``OUTPUT_MAX_CHARS``. After rendering (templated or not), the
channel's length limits apply (``LENGTH_LIMITS``), cut with an ellipsis.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from zoneinfo import ZoneInfo

from babel.dates import format_datetime, format_timedelta
from jinja2 import StrictUndefined, TemplateSyntaxError, pass_context
from jinja2.exceptions import SecurityError
from jinja2.runtime import Context
from jinja2.sandbox import SandboxedEnvironment

from uns_server.domain.errors import FieldViolation
from uns_server.domain.fields import text_problems
from uns_server.domain.locales import babel_locale, canonical_locale, fallbacks, locale_problem

TEMPLATES_MAX = 50
TITLE_MAX_CHARS = 1000
BODY_MAX_CHARS = 8000
CHANNEL_TYPE_MAX_CHARS = 64
RANGE_MAX = 1000
PRODUCT_MAX = 100_000
OUTPUT_MAX_CHARS = 65_536
ERROR_MAX_CHARS = 300
ELLIPSIS = "…"

LENGTH_LIMITS: Mapping[str, tuple[int, int]] = {
    # channel type: (title, body) in characters, after rendering.
    "twilio_sms": (160, 1600),  # Twilio refuses a body over 1600 characters
    "twilio_voice": (160, 1600),  # spoken; a long call is not an alert
    "ntfy": (250, 4096),  # a phone's notification title; ntfy's message limit
    "telegram": (250, 4096),  # Telegram's message limit
}
"""The channel types with a provider limit; the others take what they are given."""


@dataclass(frozen=True)
class Template:
    """One template (``uns.v1.Template``); empty ``channel_type`` / ``locale`` match
    any, an empty ``title`` / ``body`` keeps the raw title / message."""

    channel_type: str = ""
    locale: str = ""
    title: str = ""
    body: str = ""

    def to_json(self) -> dict[str, str]:
        return {k: v for k, v in vars(self).items() if v}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Template:
        return cls(
            **{k: str(data.get(k) or "") for k in ("channel_type", "locale", "title", "body")}
        )


@dataclass(frozen=True)
class Person:
    """Whom a message is for, as templates see them (empty for a shared channel)."""

    recipient_id: str = ""
    display_name: str = ""
    locale: str = ""
    time_zone: str = "UTC"


@dataclass(frozen=True)
class Rendered:
    """A message's title and body after templates and length limits; ``template`` is
    the index of the one that applied (None: none did, or it failed: ``error``)."""

    title: str
    body: str
    template: int | None = None
    error: str = ""


def message_fields(
    *,
    title: str,
    message: str,
    metadata: Mapping[str, Any],
    intent: str,
    notification_type: str,
    source: str,
    priority: str,
    accepted_at: datetime,
) -> dict[str, Any]:
    """The notification's variables, as every template sees them."""
    return {
        "title": title,
        "message": message,
        "metadata": metadata,
        "intent": intent,
        "notification_type": notification_type,
        "source": source,
        "priority": priority,
        "accepted_at": accepted_at,
    }


def template_violations(templates: Sequence[Template]) -> list[FieldViolation]:
    """Every problem of ``templates`` under ``spec.templates[i].<field>``: shape,
    locale, duplicates, and each title and body compiled."""
    if len(templates) > TEMPLATES_MAX:
        return [FieldViolation("spec.templates", f"at most {TEMPLATES_MAX} templates")]
    out: list[FieldViolation] = []
    seen: dict[tuple[str, str], int] = {}
    for i, tpl in enumerate(templates):
        at = f"spec.templates[{i}]"
        out += [
            FieldViolation(f"{at}.channel_type", p)
            for p in text_problems(tpl.channel_type, CHANNEL_TYPE_MAX_CHARS)
        ]
        if problem := locale_problem(tpl.locale):
            out.append(FieldViolation(f"{at}.locale", problem))
        if not tpl.title and not tpl.body:
            out.append(FieldViolation(f"{at}.body", "a template needs a title or a body"))
        for name, text, limit in (
            ("title", tpl.title, TITLE_MAX_CHARS),
            ("body", tpl.body, BODY_MAX_CHARS),
        ):
            problems = text_problems(text, limit) or _syntax_problems(text)
            out += [FieldViolation(f"{at}.{name}", p) for p in problems]
        key = (tpl.channel_type, _canonical(tpl.locale))
        if key in seen:
            out.append(
                FieldViolation(at, f"the same channel_type and locale as templates[{seen[key]}]")
            )
        seen.setdefault(key, i)
    return out


def canonical_templates(templates: Sequence[Template]) -> tuple[Template, ...]:
    """Valid templates with their locales canonical (``fr-ca`` -> ``fr-CA``)."""
    return tuple(
        Template(t.channel_type, canonical_locale(t.locale), t.title, t.body) for t in templates
    )


def choose(templates: Sequence[Template], channel_type: str, locale: str) -> int | None:
    """The index of the most specific template (see the module docstring), or None."""
    index = {(t.channel_type, t.locale): i for i, t in reversed(list(enumerate(templates)))}
    for kind in dict.fromkeys((channel_type, "")):
        for tag in fallbacks(locale):
            if (kind, tag) in index:
                return index[(kind, tag)]
    return None


def render_message(
    templates: Sequence[Template],
    fields: Mapping[str, Any],
    channel_type: str,
    person: Person,
) -> Rendered:
    """The title and body ``channel_type`` sends to ``person``. ``fields`` holds the
    notification's ``title``, ``message`` and the other variables (``notification_type``,
    ``intent``, ``source``, ``priority``, ``metadata``, ``accepted_at``)."""
    title, body = str(fields.get("title", "")), str(fields.get("message", ""))
    chosen = choose(templates, channel_type, person.locale) if templates else None
    error = ""
    if chosen is not None:
        tpl = templates[chosen]
        variables = {**fields, "recipient": _person_vars(person)}
        try:
            new_title = _render(tpl.title, variables) if tpl.title else title
            new_body = _render(tpl.body, variables) if tpl.body else body
            title, body = new_title, new_body
        except Exception as exc:  # whatever a template does, the raw message still goes
            error = _describe(exc)
            chosen = None
    title_max, body_max = LENGTH_LIMITS.get(channel_type, (0, 0))
    return Rendered(_cut(title, title_max), _cut(body, body_max), chosen, error)


# -- the sandbox ------------------------------------------------------------------------


class _Sandbox(SandboxedEnvironment):
    """The sandbox with work bounds: ``*`` and ``**`` are checked before they run."""

    intercepted_binops = frozenset({"*", "**"})

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                sized = isinstance(seq, str | list | tuple) and isinstance(n, int)
                if sized and len(seq) * n > PRODUCT_MAX:
                    raise SecurityError(f"a repetition longer than {PRODUCT_MAX} items")
        numbers = isinstance(left, int | float) and isinstance(right, int | float)
        if operator == "**" and numbers and (abs(right) > 64 or abs(left) > 2**64):
            raise SecurityError("a power this large is not allowed in a template")
        return super().call_binop(context, operator, left, right)


def _range(*args: int) -> range:
    r = range(*args)
    if len(r) > RANGE_MAX:
        raise SecurityError(f"a range longer than {RANGE_MAX} items")
    return r


@pass_context
def _datetime_filter(context: Context, value: Any, fmt: str = "medium") -> str:
    """``{{ accepted_at | datetime }}``, ``{{ metadata.since | datetime("short") }}``:
    an instant (a datetime, ISO 8601 text, or seconds since the epoch) in the person's
    time zone and language (``medium``, ``short``, ``long``, ``full``, or a CLDR
    pattern such as ``"EEE HH:mm"``)."""
    person = context.get("recipient") or {}
    zone = ZoneInfo(person.get("time_zone") or "UTC")
    return format_datetime(
        _instant(value), fmt, tzinfo=zone, locale=babel_locale(person.get("locale", ""))
    )


@pass_context
def _duration_filter(
    context: Context, value: Any, fmt: Literal["narrow", "short", "medium", "long"] = "long"
) -> str:
    """``{{ metadata.lag_seconds | duration }}`` -> "5 minutes" ("5 minutes" in French
    for a French person): seconds (or a timedelta), rounded to the largest unit
    (``long``, ``short``, ``narrow``)."""
    person = context.get("recipient") or {}
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    return format_timedelta(
        timedelta(seconds=seconds), format=fmt, locale=babel_locale(person.get("locale", ""))
    )


def _instant(value: Any) -> datetime:
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        moment = datetime.fromtimestamp(value, UTC)
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"datetime: {value[:40]!r} is not ISO 8601") from None
    else:
        raise TypeError(f"datetime: cannot read {type(value).__name__} as an instant")
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _environment() -> _Sandbox:
    env = _Sandbox(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=False)
    env.globals = {"range": _range}  # the defaults' lipsum, cycler, joiner, dict are not needed
    env.filters["datetime"] = _datetime_filter
    env.filters["duration"] = _duration_filter
    return env


_ENV = _environment()
# Compiled templates by source: a revision's few templates are rendered for every
# message; a bounded memo, cleared when full.
_COMPILED_MAX = 512
_compiled: dict[str, Any] = {}


def _compile(source: str) -> Any:
    hit = _compiled.get(source)
    if hit is None:
        hit = _ENV.from_string(source)
        if len(_compiled) >= _COMPILED_MAX:
            _compiled.clear()
        _compiled[source] = hit
    return hit


def _syntax_problems(source: str) -> list[str]:
    if not source:
        return []
    try:
        _compile(source)
    except TemplateSyntaxError as exc:
        return [f"does not compile: {exc.message} (line {exc.lineno})"]
    return []


def _render(source: str, variables: Mapping[str, Any]) -> str:
    out: list[str] = []
    size = 0
    for chunk in _compile(source).generate(variables):
        size += len(chunk)
        if size > OUTPUT_MAX_CHARS:
            raise SecurityError(f"the rendered text is longer than {OUTPUT_MAX_CHARS} characters")
        out.append(chunk)
    return "".join(out).strip()


def _person_vars(person: Person) -> dict[str, str]:
    return {
        "recipient_id": person.recipient_id,
        "display_name": person.display_name,
        "locale": person.locale,
        "time_zone": person.time_zone or "UTC",
    }


def _describe(exc: Exception) -> str:
    """Why a render failed, for the attempt (short; never a traceback)."""
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= ERROR_MAX_CHARS else text[: ERROR_MAX_CHARS - 1] + ELLIPSIS


def _cut(text: str, limit: int) -> str:
    return text if not limit or len(text) <= limit else text[: limit - 1] + ELLIPSIS


def _canonical(tag: str) -> str:
    try:
        return canonical_locale(tag)
    except ValueError:
        return tag
