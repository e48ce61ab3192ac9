"""What every text, time zone and instant a caller gives must be, whatever field holds it.

These rules exist because of what stores the values, not because of what a field means:
PostgreSQL refuses a NUL character in a text column (SQLite keeps it), a time zone name
becomes a file name inside the zone database (a 300-character one is an ``OSError``,
not "no such zone"), and an instant near the end of what a ``datetime`` holds
(9999-12-31) overflows as soon as a shift or a deadline is added to it. Each rule is
written once here; ``domain.validation`` and ``domain.people`` apply them to the fields
they know, and the gRPC decode step (``api.request_text``) applies the NUL rule to every
string of every request, so a field nobody thought of cannot reach the database with
one. A lone surrogate (``"\\ud800"`` in JSON) cannot be encoded as UTF-8 at all; gRPC's
protobuf decoder refuses it, and the JSON paths that parse text themselves (the JSON
bridge, the provider callbacks) ask ``has_lone_surrogate``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

NUL = "\x00"
NUL_PROBLEM = "must not contain NUL characters"
SURROGATE_PROBLEM = "must be valid Unicode text (it holds a lone UTF-16 surrogate)"

TIME_ZONE_MAX_CHARS = 64
"""The ``time_zone`` columns' width; the longest IANA name is 32 characters."""
ZONE_PROBLEM = "must be an IANA time zone, e.g. Europe/Paris"

TIME_MIN = datetime(1970, 1, 1, tzinfo=UTC)
TIME_MAX = datetime(9000, 1, 1, tzinfo=UTC)
"""Instants a caller gives (a rotation's start, an override, the time GetOnCall asks
about) lie in ``[TIME_MIN, TIME_MAX)``: a thousand years below ``datetime``'s end, so
adding a shift, a deadline or an escalation offset never overflows."""
TIME_PROBLEM = "must be between 1970-01-01T00:00:00Z and 9000-01-01T00:00:00Z"


def text_problems(value: str, max_chars: int, *, required: bool = False) -> list[str]:
    """Why ``value`` cannot be stored as a field of at most ``max_chars`` characters
    (a whitespace-only required value counts as missing); empty when it can."""
    if required and not value.strip():
        return ["is required"]
    problems = []
    if len(value) > max_chars:
        problems.append(f"must be at most {max_chars} characters")
    if NUL in value:
        problems.append(NUL_PROBLEM)
    return problems


def has_lone_surrogate(value: str) -> bool:
    """Whether ``value`` holds a code point UTF-8 cannot encode (U+D800 to U+DFFF)."""
    if value.isascii():
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def zone_problem(value: str) -> str | None:
    """Why ``value`` is not an IANA time zone this server knows, or None."""
    if not value or value != value.strip() or len(value) > TIME_ZONE_MAX_CHARS:
        return ZONE_PROBLEM
    if NUL in value or has_lone_surrogate(value):
        return ZONE_PROBLEM
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        # OSError: a name the file system refuses (too long a component, say).
        return ZONE_PROBLEM
    return None


def time_problem(value: datetime) -> str | None:
    """Why ``value`` is outside the instants a caller may give, or None."""
    if TIME_MIN <= value < TIME_MAX:
        return None
    return TIME_PROBLEM
