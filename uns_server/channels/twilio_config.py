"""The options of the Twilio channel types (``channels.config`` reads the file)::

    sms:
      type: twilio_sms
      account_sid: AC0123456789abcdef0123456789abcdef
      auth_token_env: UNS_TWILIO_AUTH_TOKEN   # basic auth, and verifies Twilio's webhooks
      from: "+14155550100"                    # the Twilio number (E.164)
      notify_outcome: false                   # an SMS with the outcome when it ends
    phone:
      type: twilio_voice
      account_sid_env: UNS_TWILIO_ACCOUNT_SID
      auth_token_env: UNS_TWILIO_AUTH_TOKEN
      from: "+14155550100"

Each option also reads as ``<option>_env``; ``base_url`` (default
``https://api.twilio.com``) points a test at a loopback fake. The auth token is a
credential: never in a ``repr``, a result or a log (nor the account SID in a ``repr``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from uns_server.channels._redact import MASK
from uns_server.channels.options import Options
from uns_server.domain.twilio import e164

TWILIO_BASE_URL_DEFAULT = "https://api.twilio.com"
TWILIO_TIMEOUT_SECONDS_DEFAULT = 10.0
_ACCOUNT_SID = re.compile(r"AC[0-9a-fA-F]{32}")


@dataclass(frozen=True)
class _TwilioConfig:
    account_sid: str
    auth_token: str
    from_number: str
    base_url: str = TWILIO_BASE_URL_DEFAULT
    timeout_seconds: float = TWILIO_TIMEOUT_SECONDS_DEFAULT

    def __repr__(self) -> str:
        shown = {f.name: getattr(self, f.name) for f in fields(self)}
        # The SID is half of the basic-auth pair: masked as the token is.
        shown["auth_token"] = shown["account_sid"] = MASK
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in shown.items())})"


@dataclass(frozen=True, repr=False)
class TwilioSmsConfig(_TwilioConfig):
    """Twilio Messages API; a person's contact is their number, they answer by reply."""

    type: ClassVar[str] = "twilio_sms"
    notify_outcome: bool = False
    """Send an SMS with the outcome when the obligation ends (off: a text at 3 a.m.
    saying someone else answered is rarely wanted)."""


@dataclass(frozen=True, repr=False)
class TwilioVoiceConfig(_TwilioConfig):
    """Twilio Calls API; the person answers with a key (1 acknowledges, 2 dismisses)."""

    type: ClassVar[str] = "twilio_voice"


def _common(o: Options) -> dict[str, Any]:
    sid = o.secret("account_sid")
    if not _ACCOUNT_SID.fullmatch(sid):
        raise o.fail("option 'account_sid' must be a Twilio account SID (AC + 32 hex digits)")
    number = o.secret("from")
    if e164(number) is None:
        raise o.fail("option 'from' must be a phone number in E.164 form (+14155550100)")
    return {
        "account_sid": sid,
        "auth_token": o.secret("auth_token"),
        "from_number": number,
        "base_url": o.url("base_url", default=TWILIO_BASE_URL_DEFAULT).rstrip("/"),
        "timeout_seconds": o.seconds("timeout_seconds", TWILIO_TIMEOUT_SECONDS_DEFAULT),
    }


def twilio_sms(o: Options) -> TwilioSmsConfig:
    return TwilioSmsConfig(**_common(o), notify_outcome=o.flag("notify_outcome", False))


def twilio_voice(o: Options) -> TwilioVoiceConfig:
    return TwilioVoiceConfig(**_common(o))
