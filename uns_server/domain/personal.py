"""People's contacts are personal data (SPEC §3, docs/CONTRACT.md): only an operator
reads a person's address (an email address, a Slack user, a phone number). Whatever
else names a person's own message names the person instead, ``recipient:<id>``.

An event's payload records a person's message as a mapping that holds its
``recipient_id`` (a CHANNEL_ATTEMPT_RESULT and its ``provider_reference``, each result
of a REMINDER_SENT or ESCALATED step): there, ``recipient`` is the address the
provider was given, the email channel's ``refused_recipients`` lists it, a Telegram
message's reference and answer name its chat and presser (``telegram_chat_id``, ...),
and a provider's ``error`` may quote it (``550 <dave@example.com>: no such user``,
Twilio's ``The 'To' number +14155552671 is not a valid phone number``).
A notification's outcome sums its channels' errors up in ``error_message``
(``mail@dave: 550 <dave@example.com>: ...; hook: HTTP 503``): the part of each
person's route (``<channel>@<recipient id>``) is rewritten the same way
(``redacted_error_message``). ``redacted_payload`` rewrites those; everything else is
kept.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# An email address as a provider's reply quotes it (a route key such as
# ``email@dave`` is never in an ``error``: errors are the provider's own words).
_EMAIL = re.compile(r"[^\s<>\"'(),;:\[\]@]+@[^\s<>\"'(),;:\[\]@]+\.[^\s<>\"'(),;:\[\]@]+")
# A phone number as Twilio's errors quote it ("The 'To' number +14155552671 is not ...").
_PHONE = re.compile(r"\+\d{7,15}")


# The fields that hold a person's address: whom a message reached, and a Telegram chat
# id (a private chat's is the user's id) in a message's reference and the presser in an
# answer's metadata.
_ADDRESS_KEYS = frozenset(
    {"recipient", "telegram_chat_id", "telegram_user_id", "telegram_username"}
)


# Where an outcome's ``error_message`` names a route: ``<channel>@<recipient id>[+<n>]: ``
# (``domain.lifecycle``); any other ``<channel>: `` starts a channel's own part.
_ROUTE_PART = re.compile(r"[^\s:;@]+@([^\s:;]+?)(?:\+\d+)?: ")
_CHANNEL_PART = re.compile(r"[^\s:;@]+: ")


def person(recipient_id: str) -> str:
    """How a person's message is named to whoever may not read their address."""
    return "recipient:" + recipient_id


def redacted_payload(payload: Mapping[str, Any]) -> dict[str, Any] | None:
    """``payload`` with no person's address, or None when it names none (the common
    case: the payload is then shared as it is, and nothing was copied)."""
    out = _redact(payload, "")
    return None if out is payload else dict(out)


def _addresses_out(text: str, rid: str) -> str:
    """``text`` with the email addresses and phone numbers it quotes named as the person."""
    return _PHONE.sub(person(rid), _EMAIL.sub(person(rid), text))


def redacted_error_message(text: str) -> str:
    """An outcome's ``error_message`` without the addresses its people's parts quote."""
    if "@" not in text:
        return text
    parts, rid = [], ""
    for part in text.split("; "):
        route = _ROUTE_PART.match(part)
        head = ""
        if route is not None:
            rid, head, part = route.group(1), part[: route.end()], part[route.end() :]
        elif _CHANNEL_PART.match(part):
            rid = ""
        # (else: the error of the part before went on past a "; ")
        parts.append(head + (_addresses_out(part, rid) if rid else part))
    return "; ".join(parts)


def _redact(value: Any, recipient_id: str) -> Any:
    """``value`` with the addresses of a person's message replaced; the same object
    when nothing changed. ``recipient_id``: the person of the enclosing mapping."""
    if isinstance(value, Mapping):
        own = value.get("recipient_id")
        rid = own if isinstance(own, str) and own else recipient_id
        changed = {}
        for key, item in value.items():
            new = _redact(item, rid)
            if rid and key in _ADDRESS_KEYS and isinstance(item, str) and item != person(rid):
                new = person(rid)
            elif rid and key == "error" and isinstance(item, str):
                new = _addresses_out(item, rid)
            elif key == "error_message" and isinstance(item, str):
                new = redacted_error_message(item)
            elif rid and key == "refused_recipients" and isinstance(item, list) and item:
                new = [person(rid)] * len(item)  # the email channel's metadata
            if new is not item and new != item:
                changed[key] = new
        return {**value, **changed} if changed else value
    if isinstance(value, list):
        items = [_redact(v, recipient_id) for v in value]
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    return value
