"""What a notification's attempts left: the delivery outcome (the ``outcome`` column),
typed.

The domain's decisions still hand the store the JSON they write
(``lifecycle.Settlement.outcome``, ``moves.EMPTY_OUTCOME``); the store parses the
column once per row read (``store.records``) into :class:`DeliveryOutcome`. Rows of
every earlier version read: a key that is absent reads as empty (the first rows of
some tests, and of versions before ``recipients_unreachable``, lack them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["DeliveryOutcome", "Unreachable"]


@dataclass(frozen=True, slots=True)
class Unreachable:
    """A person a policy target named whom the attempt could not ask (SPEC §6)."""

    recipient_id: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"recipient_id": self.recipient_id, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class DeliveryOutcome:
    """The channels of a notification's latest attempt in its cycle, and why it failed.

    ``channels_succeeded`` accumulates over the cycle (a retry asks only the channels
    still missing); the channel names are route keys (``<channel>@<recipient id>``)
    for a person's own message."""

    channels_attempted: tuple[str, ...] = ()
    channels_succeeded: tuple[str, ...] = ()
    channels_failed: tuple[str, ...] = ()
    error_message: str | None = None
    recipients_unreachable: tuple[Unreachable, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The stored JSON object (``recipients_unreachable`` only when someone was)."""
        out: dict[str, Any] = {
            "channels_attempted": list(self.channels_attempted),
            "channels_succeeded": list(self.channels_succeeded),
            "channels_failed": list(self.channels_failed),
            "error_message": self.error_message,
        }
        if self.recipients_unreachable:
            out["recipients_unreachable"] = [u.to_json() for u in self.recipients_unreachable]
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> DeliveryOutcome:
        """Inverse of :meth:`to_json`; None or ``{}`` is no attempt yet."""
        if not data:
            return _NONE
        get = data.get
        unreachable = get("recipients_unreachable")
        return cls(
            tuple(get("channels_attempted") or ()),
            tuple(get("channels_succeeded") or ()),
            tuple(get("channels_failed") or ()),
            get("error_message"),
            tuple(
                Unreachable(str(u["recipient_id"]), str(u.get("reason") or ""))
                for u in unreachable
                if u.get("recipient_id")
            )
            if unreachable
            else (),
        )


_NONE = DeliveryOutcome()
