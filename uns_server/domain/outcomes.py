"""What a notification's attempts left, typed: the delivery outcome (the ``outcome``
column) and the messages providers accepted (``provider_refs``).

The domain's decisions still hand the store the JSON they write
(``lifecycle.Settlement.outcome``, ``moves.EMPTY_OUTCOME``); the store parses the
column once per row read (``store.records``) into :class:`DeliveryOutcome`. Rows of
every earlier version read: a key that is absent reads as empty (the first rows of
some tests, and of versions before ``recipients_unreachable``, lack them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

__all__ = [
    "DeliveryOutcome",
    "Held",
    "ProviderRef",
    "ProviderRefs",
    "Unreachable",
    "provider_refs_from_json",
    "provider_refs_json",
]


@dataclass(frozen=True, slots=True)
class Unreachable:
    """A person a policy target named whom the attempt could not ask (SPEC §6)."""

    recipient_id: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"recipient_id": self.recipient_id, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class Held:
    """A person's message their own quiet hours hold, sent by the attempt due when the
    hold ends (SPEC §6; ``outcome.held``)."""

    recipient_id: str
    channel: str
    route: str
    held_until: datetime | None

    def to_json(self) -> dict[str, str]:
        out = {"channel": self.channel, "route": self.route, "recipient_id": self.recipient_id}
        if self.held_until is not None:
            out["held_until"] = self.held_until.isoformat()
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Held:
        get = data.get
        return cls(
            str(get("recipient_id") or ""),
            str(get("channel") or ""),
            str(get("route") or ""),
            _time(get("held_until")),
        )


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
    held: tuple[Held, ...] = ()
    """People whose own quiet hours hold their message (the delivery stays PENDING)."""
    channels_deferred: tuple[str, ...] = ()
    """Channels the latest attempt deferred (throttled or busy; no attempt spent)."""
    throttle_deferrals: int = 0
    """Throttle deferrals in this cycle so far (``lifecycle.decide_settlement``)."""
    staged: tuple[Mapping[str, Any], ...] = ()
    """People's staged rules this cycle started (``domain.person_rule_jobs``): each
    ``{recipient_id, channel, after_seconds, cycle, due_time, state}``, with
    ``fire_time`` (and ``error``) once fired."""

    def to_json(self) -> dict[str, Any]:
        """The stored JSON object (``recipients_unreachable`` and ``held`` only when
        someone was)."""
        out: dict[str, Any] = {
            "channels_attempted": list(self.channels_attempted),
            "channels_succeeded": list(self.channels_succeeded),
            "channels_failed": list(self.channels_failed),
            "error_message": self.error_message,
        }
        if self.recipients_unreachable:
            out["recipients_unreachable"] = [u.to_json() for u in self.recipients_unreachable]
        if self.held:
            out["held"] = [h.to_json() for h in self.held]
        if self.channels_deferred:
            out["channels_deferred"] = list(self.channels_deferred)
        if self.throttle_deferrals:
            out["throttle_deferrals"] = self.throttle_deferrals
        if self.staged:
            out["staged"] = [dict(s) for s in self.staged]
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> DeliveryOutcome:
        """Inverse of :meth:`to_json`; None or ``{}`` is no attempt yet."""
        if not data:
            return _NONE
        get = data.get
        attempted, succeeded, failed = (
            get("channels_attempted"),
            get("channels_succeeded"),
            get("channels_failed"),
        )
        error, unreachable, held = (
            get("error_message"),
            get("recipients_unreachable"),
            get("held"),
        )
        deferred, throttles = get("channels_deferred"), get("throttle_deferrals")
        staged = get("staged")
        if not (
            attempted or succeeded or failed or error or unreachable or held or deferred or staged
        ):
            return _NONE  # every row before its first attempt: shared, as it is frozen
        return cls(
            tuple(attempted or ()),
            tuple(succeeded or ()),
            tuple(failed or ()),
            error,
            tuple(
                Unreachable(str(u["recipient_id"]), str(u.get("reason") or ""))
                for u in unreachable
                if u.get("recipient_id")
            )
            if unreachable
            else (),
            tuple(Held.from_json(h) for h in held if h.get("recipient_id")) if held else (),
            tuple(deferred or ()),
            int(throttles or 0),
            tuple(dict(s) for s in staged or () if isinstance(s, dict)),
        )


_NONE = DeliveryOutcome()


@dataclass(frozen=True, slots=True)
class ProviderRef:
    """One message a channel accepted: an entry of ``provider_refs``, kept under the
    channel's name (the delivery), its route key ``<channel>@<recipient id>`` (a
    person's own message) or ``<key>:<follow-up>:<number>`` (a reminder or escalation
    step; ``workers.dispatch.references``). The provider's own reference is spread into
    the entry, so ``json`` (the entry as stored) is what a channel's ``update``
    receives; the fields are the entry's, "" or 0 when it has none (as on the wire,
    ``uns.v1.ProviderReference``)."""

    channel: str
    channel_type: str
    """The adapter's type (``slack``, ``pagerduty``, ``webhook``, ...): the ``type`` key."""
    message_id: str
    attempt: int
    cycle: int
    at: datetime | None
    """When the provider accepted it."""
    follow_up: str
    """``REMINDER`` or ``ESCALATION`` for a follow-up's message; "" for the delivery's."""
    follow_up_number: int
    recipient_id: str
    """The person a targeted message was for ("" for a channel's own destination)."""
    due_time: datetime | None
    """A person's follow-up: when its step fell due (their reminders count from it)."""
    recipient: str
    slack_channel: str
    slack_ts: str
    email_message_id: str
    pagerduty_dedup_key: str
    webhook_id: str
    json: Mapping[str, Any]

    def provider_field(self, name: str) -> str:
        """A provider's own field by the name a callback looks it up by ("" if absent)."""
        value = self.json.get(name)
        return "" if value is None else str(value)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ProviderRef:
        get = data.get
        return cls(
            str(get("channel") or ""),
            str(get("type") or ""),
            str(get("message_id") or ""),
            int(get("attempt") or 0),
            int(get("cycle") or 0),
            _time(get("at")),
            str(get("follow_up") or ""),
            int(get("follow_up_number") or 0),
            str(get("recipient_id") or ""),
            _time(get("due_time")),
            str(get("recipient") or ""),
            str(get("slack_channel") or ""),
            str(get("slack_ts") or ""),
            str(get("email_message_id") or ""),
            str(get("pagerduty_dedup_key") or ""),
            str(get("webhook_id") or ""),
            data,
        )


ProviderRefs = Mapping[str, ProviderRef]


def provider_refs_from_json(data: Mapping[str, Any] | None) -> ProviderRefs | None:
    """The ``provider_refs`` column, parsed (None while no provider took a message)."""
    if data is None:
        return None
    return {
        key: ProviderRef.from_json(ref) for key, ref in data.items() if isinstance(ref, Mapping)
    }


def provider_refs_json(refs: ProviderRefs | None) -> dict[str, Any]:
    """The entries as stored, to merge new ones into (``moves`` write the whole column)."""
    return {key: ref.json for key, ref in (refs or {}).items()}


def _time(value: Any) -> datetime | None:
    # Ours is always an ISO time; an entry that lacks one (or whose provider spread a
    # value of its own under the name) still reads, without it.
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None
