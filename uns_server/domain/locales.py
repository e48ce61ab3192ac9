"""A person's language (``Recipient.locale``, SPEC §7): BCP 47 tags, checked by Babel.

A tag is stored in its canonical form (``en-us`` -> ``en-US``), so that templates
match it by equality and its fallbacks are one split away: ``fr-CA`` falls back to
``fr``, then to a template for any language (``domain.templates``).
"""

from __future__ import annotations

from babel import Locale, UnknownLocaleError

LOCALE_MAX_CHARS = 35
"""The ``locale`` column's width (RFC 5646 recommends room for 35 characters)."""
LOCALE_PROBLEM = "must be a BCP 47 language tag this server knows, e.g. fr-FR or en"


def canonical_locale(value: str) -> str:
    """``value`` as a canonical BCP 47 tag (``fr-FR``, ``zh-Hant-TW``); "" stays "".
    ValueError when Babel does not know it (its CLDR data names every language it
    can format dates and numbers in)."""
    if not value:
        return ""
    if len(value) > LOCALE_MAX_CHARS or value != value.strip() or "_" in value:
        raise ValueError(value)
    try:
        parsed = Locale.parse(value, sep="-")
    except (ValueError, TypeError, UnknownLocaleError):
        raise ValueError(value) from None
    return "-".join(p for p in (parsed.language, parsed.script, parsed.territory) if p)


def locale_problem(value: str) -> str | None:
    """Why ``value`` is not an empty or known BCP 47 tag, or None."""
    try:
        canonical_locale(value)
    except ValueError:
        return LOCALE_PROBLEM
    return None


def babel_locale(tag: str) -> Locale:
    """The Babel locale of a canonical tag ("" or unknown: English)."""
    try:
        return Locale.parse(tag or "en", sep="-")
    except (ValueError, TypeError, UnknownLocaleError):
        return Locale.parse("en")


def fallbacks(tag: str) -> tuple[str, ...]:
    """The tags a template may be written for, most specific first, ending with ""
    (any language): ``zh-Hant-TW`` -> (zh-Hant-TW, zh-Hant, zh, "")."""
    parts = tag.split("-") if tag else []
    return (*("-".join(parts[:n]) for n in range(len(parts), 0, -1)), "")
