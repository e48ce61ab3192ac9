"""Twilio's rules, pure: phone numbers, its request signature, and how a person answers
by SMS or by a key pressed on a call (SPEC §7 "People reached anywhere").

* Numbers are E.164 (``+14155552671``), checked with ``phonenumbers``: a contact must be
  a valid number written canonically, so the ``From`` Twilio posts with a reply (always
  E.164) finds the person by plain equality.
* ``X-Twilio-Signature`` is base64(HMAC-SHA1(auth token, URL + every form parameter's
  name and value, sorted by name)), the URL being the one Twilio requested, query
  included. Twilio is inconsistent about the default port in that URL, so (as its own
  ``RequestValidator``) both forms are accepted. Comparisons are constant-time.
* An SMS answer is ``ACK`` or ``1`` (acknowledge), ``DISMISS`` or ``2`` (dismiss),
  case-insensitive, optionally followed by the notification's answer code (four
  digits, ``ACK 4821``) for a person who owes more than one answer at once.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import phonenumbers

# Where Twilio posts: SMS replies (the number's "A message comes in" webhook), the key
# pressed on a call (the Gather action) and the call's final status.
SMS_PATH = "/integrations/twilio/sms"
VOICE_PATH = "/integrations/twilio/voice"
VOICE_STATUS_PATH = "/integrations/twilio/voice/status"
ANSWER_CODE_DIGITS = 4
_ACK_WORDS = frozenset({"ACK", "1"})
_DISMISS_WORDS = frozenset({"DISMISS", "2"})
_DEFAULT_PORTS = {"https": 443, "http": 80}


def e164(number: str) -> str | None:
    """``number`` when it is a valid phone number written in E.164; None otherwise."""
    if not number.startswith("+"):
        return None
    try:
        parsed = phonenumbers.parse(number, None)
    except phonenumbers.NumberParseException:
        return None
    if not phonenumbers.is_valid_number(parsed):
        return None
    canonical = phonenumbers.format_number(parsed, phonenumbers.PhoneNumberFormat.E164)
    return number if canonical == number else None


def e164_problem(number: str) -> str | None:
    """Why ``number`` is not a phone number Twilio can reach, or None."""
    if e164(number) is not None:
        return None
    return "must be a phone number in E.164 form (+14155552671) for a Twilio channel"


def twilio_signature(auth_token: str, url: str, params: Iterable[tuple[str, str]]) -> str:
    """The ``X-Twilio-Signature`` Twilio computes for a POST of ``params`` to ``url``."""
    values: dict[str, set[str]] = {}
    for name, value in params:
        values.setdefault(name, set()).add(value)
    text = url + "".join(name + v for name in sorted(values) for v in sorted(values[name]))
    digest = hmac.new(auth_token.encode(), text.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def _port_forms(url: str) -> list[str]:
    """``url`` as given, without its port and with the scheme's default port."""
    parts = urlsplit(url)
    default = _DEFAULT_PORTS.get(parts.scheme)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    forms = [url]
    if parts.port is not None and parts.port == default:
        forms.append(urlunsplit(parts._replace(netloc=host)))
    elif parts.port is None and default is not None:
        forms.append(urlunsplit(parts._replace(netloc=f"{host}:{default}")))
    return forms


def verify_twilio(
    auth_tokens: Sequence[str],
    url: str,
    params: Sequence[tuple[str, str]],
    signature: str | None,
) -> str | None:
    """The auth token (of ``auth_tokens``) that signed this request; None if none did."""
    if not signature:
        return None
    for token in auth_tokens:
        for form in _port_forms(url):
            expected = twilio_signature(token, form, params)
            if hmac.compare_digest(signature.encode(), expected.encode()):
                return token
    return None


def answer_code(notification_id: str) -> str:
    """The short code that names a notification in an SMS answer: stable (derived from
    the id), four digits, unique enough among the few answers one person owes at once
    (a clash is told apart by asking again)."""
    digest = hashlib.sha256(notification_id.encode()).digest()
    return f"{int.from_bytes(digest[:4], 'big') % 10**ANSWER_CODE_DIGITS:0{ANSWER_CODE_DIGITS}d}"


@dataclass(frozen=True)
class SmsAnswer:
    """A reply that answers: dismiss or acknowledge, and the code it names ("" none)."""

    dismiss: bool
    code: str = ""


def parse_sms_answer(body: str) -> SmsAnswer | None:
    """``ACK``/``1``/``DISMISS``/``2``, optionally with an answer code; None for any
    other text (a question, ``STOP``, which Twilio handles itself)."""
    words = body.strip().upper().split()
    if not words or len(words) > 2:
        return None
    if words[0] in _ACK_WORDS:
        dismiss = False
    elif words[0] in _DISMISS_WORDS:
        dismiss = True
    else:
        return None
    code = words[1] if len(words) == 2 else ""
    if code and not (code.isdigit() and len(code) == ANSWER_CODE_DIGITS):
        return None
    return SmsAnswer(dismiss, code)


def voice_answer(digits: str) -> bool | None:
    """The key pressed on a call: True dismisses (2), False acknowledges (1), None for
    anything else (no key at all, another key)."""
    return {"1": False, "2": True}.get(digits.strip())
