"""People and rotations (SPEC §6 "People and on-call"): the values and their validation.

A ``Recipient`` is a person an obligation can be owed by; a ``Rotation`` says which
of its members is on call when (the arithmetic is ``domain.oncall``). ``build_*``
turn operator input into values or raise INVALID_REQUEST listing every field
violation (paths relative to the request: ``recipient.contacts[0].address``).
``check_contacts`` needs the server's channels and their kinds (``ChannelKind``), so
it runs only where those are known (the server; ``uns-admin`` on the database does
not know them and checks the shape of addresses only where the channel name says
nothing).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any
from zoneinfo import ZoneInfo

from uns_server.domain.enums import Urgency
from uns_server.domain.errors import FieldViolation, InvalidRequest, UnknownPolicyChannel
from uns_server.domain.fields import text_problems, time_problem, zone_problem
from uns_server.domain.locales import canonical_locale, locale_problem
from uns_server.domain.schedule.quiet_hours import QuietHours
from uns_server.domain.staged_rules import NotificationRule, rule_violations
from uns_server.domain.twilio import e164_problem

ID_MAX_CHARS = 64
DISPLAY_NAME_MAX_CHARS = 255
ADDRESS_MAX_CHARS = 255
CHANNEL_MAX_CHARS = 64
"""A channel's name, as the channels file and ``uns_channels.name`` hold it."""
CONTACTS_MAX = 20
MEMBERS_MAX = 100
OVERRIDES_MAX = 500
SHIFT_MAX = timedelta(days=366)

_ID = re.compile(r"[a-z0-9._-]{1,64}")
# Deliberately loose (one @, a dotted domain, no spaces): the mail server decides the
# rest; this catches a Slack id or a name typed where an address belongs.
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s.]+")
_SLACK_USER = re.compile(r"[UW][A-Z0-9]{2,20}")
_PAGERDUTY_ID = re.compile(r"P[A-Z0-9]{5,13}")
_NTFY_TOPIC = re.compile(r"[-_A-Za-z0-9]{1,64}")  # ntfy's own topic rule
# A Telegram chat id (a user's or a group's, negative for groups: -100... for
# supergroups and channels) or a public channel's @username (5-32 characters).
_TELEGRAM_CHAT = re.compile(r"-?[1-9][0-9]{0,19}|@[A-Za-z][A-Za-z0-9_]{4,31}")


class ChannelKind(StrEnum):
    """What a configured channel can address a person on."""

    EMAIL = "email"
    SLACK_WEB_API = "slack"
    SLACK_WEBHOOK = "slack-webhook"
    PAGERDUTY = "pagerduty"
    WEBHOOK = "webhook"
    NTFY = "ntfy"
    TEAMS = "teams"
    TELEGRAM = "telegram"
    PHONE = "phone"  # twilio_sms, twilio_voice: an E.164 number
    LOG = "log"


@dataclass(frozen=True)
class Contact:
    """One way to reach a person: a channel name and the person's address on it."""

    channel: str
    address: str


@dataclass(frozen=True)
class Recipient:
    """A person (``uns_recipients``). ``updated_by``/times are set by the store."""

    recipient_id: str
    display_name: str
    time_zone: str
    contacts: tuple[Contact, ...] = ()
    quiet_hours: QuietHours | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    updated_by: str = ""
    # BCP 47, canonical (``domain.locales``); "" when the person has none.
    locale: str = ""
    # Which contact when, per urgency (``domain.staged_rules``); none: all at once.
    notification_rules: tuple[NotificationRule, ...] = ()

    def contacts_json(self) -> list[dict[str, str]]:
        return [{"channel": c.channel, "address": c.address} for c in self.contacts]

    def rules_json(self) -> list[dict[str, object]]:
        return [r.to_json() for r in self.notification_rules]


@dataclass(frozen=True)
class Override:
    """``recipient_id`` is on call in ``[start, end)``, over the shifts."""

    recipient_id: str
    start: datetime
    end: datetime


@dataclass(frozen=True)
class Rotation:
    """An on-call rotation (``uns_rotations``): members take shifts in order from
    ``start``; ``overrides`` win, later entries over earlier ones."""

    rotation_id: str
    members: tuple[str, ...]
    start: datetime
    shift: timedelta
    time_zone: str
    overrides: tuple[Override, ...] = field(default=())
    created_at: datetime | None = None
    updated_at: datetime | None = None
    updated_by: str = ""

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.time_zone)

    def referenced(self) -> set[str]:
        """Every recipient the rotation names: members and override recipients."""
        return set(self.members) | {o.recipient_id for o in self.overrides}

    def overrides_json(self) -> list[dict[str, str]]:
        return [
            {"recipient_id": o.recipient_id, "start": _iso(o.start), "end": _iso(o.end)}
            for o in self.overrides
        ]

    @staticmethod
    def overrides_from_json(data: Sequence[Mapping[str, Any]]) -> tuple[Override, ...]:
        return tuple(
            Override(
                str(o["recipient_id"]),
                datetime.fromisoformat(o["start"]),
                datetime.fromisoformat(o["end"]),
            )
            for o in data
        )


def _iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat()


def id_problems(value: str) -> list[str]:
    if not value:
        return ["is required"]
    if not _ID.fullmatch(value):
        return [f"must be 1 to {ID_MAX_CHARS} characters of a-z, 0-9, '.', '_' and '-'"]
    return []


def check_id(value: str, field_name: str) -> str:
    problems = id_problems(value)
    if problems:
        raise InvalidRequest.of_field(field_name, problems[0])
    return value


def _raise(violations: list[FieldViolation]) -> None:
    if violations:
        fields = ",".join(dict.fromkeys(v.field for v in violations))
        first = violations[0]
        raise InvalidRequest(
            f"{first.field}: {first.description}"
            + (f" (and {len(violations) - 1} more)" if len(violations) > 1 else ""),
            metadata={"fields": fields},
            violations=violations,
        )


def build_recipient(
    recipient_id: str,
    display_name: str,
    time_zone: str,
    contacts: Sequence[tuple[str, str]],
    quiet_hours: tuple[str, str, str] | None,
    prefix: str = "recipient",
    locale: str = "",
    rules: Sequence[tuple[str, timedelta | None, Urgency | None]] = (),
) -> Recipient:
    """Validate operator input; INVALID_REQUEST lists every problem. The locale is
    kept in its canonical form (``en-us`` -> ``en-US``). ``rules``: (contact channel,
    after, urgency), each naming the channel of one of ``contacts``."""
    v: list[FieldViolation] = []
    v += [FieldViolation(f"{prefix}.recipient_id", p) for p in id_problems(recipient_id)]
    v += [
        FieldViolation(f"{prefix}.display_name", p)
        for p in text_problems(display_name, DISPLAY_NAME_MAX_CHARS, required=True)
    ]
    problem = zone_problem(time_zone)
    if problem:
        v.append(FieldViolation(f"{prefix}.time_zone", problem))
    if len(contacts) > CONTACTS_MAX:
        v.append(FieldViolation(f"{prefix}.contacts", f"at most {CONTACTS_MAX} contacts"))
    built: list[Contact] = []
    for i, (channel, address) in enumerate(contacts[:CONTACTS_MAX]):
        at = f"{prefix}.contacts[{i}]"
        v += [
            FieldViolation(f"{at}.channel", p)
            for p in text_problems(channel, CHANNEL_MAX_CHARS, required=True)
        ]
        said = text_problems(address, ADDRESS_MAX_CHARS, required=True)
        if address != address.strip() and not said:
            said = ["must not have surrounding spaces"]
        v += [FieldViolation(f"{at}.address", p) for p in said]
        contact = Contact(channel, address)
        if contact in built:
            v.append(FieldViolation(at, "repeats an earlier contact"))
        built.append(contact)
    quiet = None
    if quiet_hours is not None:
        quiet, problems = QuietHours.parse(*quiet_hours, field=f"{prefix}.quiet_hours")
        v += problems
    problem = locale_problem(locale)
    if problem:
        v.append(FieldViolation(f"{prefix}.locale", problem))
    staged, problems = rule_violations(rules, [c.channel for c in built], prefix)
    v += problems
    _raise(v)
    return Recipient(
        recipient_id,
        display_name,
        time_zone,
        tuple(built),
        quiet,
        locale=canonical_locale(locale),
        notification_rules=staged,
    )


def address_problem(kind: ChannelKind, address: str) -> str | None:
    """Why ``address`` cannot address a person on a channel of ``kind``, or None."""
    if kind is ChannelKind.EMAIL and not _EMAIL.fullmatch(address):
        return "must be an email address (name@example.com) for an email channel"
    if kind is ChannelKind.SLACK_WEB_API and not _SLACK_USER.fullmatch(address):
        return "must be a Slack user id (U… or W…) for a direct message on a Slack channel"
    if kind is ChannelKind.SLACK_WEBHOOK:
        return (
            "this Slack channel posts through an incoming webhook, which cannot send "
            "a direct message; use a Slack channel in Web API mode (token)"
        )
    if kind is ChannelKind.PAGERDUTY and not _PAGERDUTY_ID.fullmatch(address):
        return "must be a PagerDuty user or service id (P…) for a PagerDuty channel"
    if kind is ChannelKind.NTFY and not _NTFY_TOPIC.fullmatch(address):
        return "must be an ntfy topic (1-64 letters, digits, '-' or '_') for an ntfy channel"
    if kind is ChannelKind.TELEGRAM and not _TELEGRAM_CHAT.fullmatch(address):
        return (
            "must be a Telegram chat id (an integer, negative for a group) or a "
            "channel's @username for a Telegram channel"
        )
    if kind is ChannelKind.TEAMS:
        return (
            "a Teams channel posts to one Teams channel through its workflow and cannot "
            "address a person; list it in the policy's channels instead"
        )
    if kind is ChannelKind.PHONE:
        return e164_problem(address)
    return None


def check_contacts(
    recipient: Recipient, kinds: Mapping[str, ChannelKind], prefix: str = "recipient"
) -> None:
    """UNKNOWN_CHANNEL when a contact names a channel this server does not have (like
    PutPolicyRevision), then INVALID_REQUEST when an address does not fit its channel."""
    missing: dict[str, None] = {}
    unknown: list[FieldViolation] = []
    bad: list[FieldViolation] = []
    for i, contact in enumerate(recipient.contacts):
        at = f"{prefix}.contacts[{i}]"
        kind = kinds.get(contact.channel)
        if kind is None:
            unknown.append(
                FieldViolation(f"{at}.channel", f"this server has no channel {contact.channel!r}")
            )
            missing[contact.channel] = None
            continue
        problem = address_problem(kind, contact.address)
        if problem:
            bad.append(FieldViolation(f"{at}.address", problem))
    if unknown:
        have = ", ".join(sorted(kinds)) or "none"
        raise UnknownPolicyChannel(
            f"no such channel on this server: {', '.join(missing)} (it has: {have})",
            metadata={
                "channels": ",".join(missing),
                "fields": ",".join(v.field for v in unknown),
            },
            violations=unknown,
        )
    _raise(bad)


def build_rotation(
    rotation_id: str,
    members: Sequence[str],
    start: datetime | None,
    shift: timedelta | None,
    time_zone: str,
    overrides: Sequence[tuple[str, datetime | None, datetime | None]],
    prefix: str = "rotation",
) -> Rotation:
    """Validate operator input (existence of the people is the service's check)."""
    v: list[FieldViolation] = []
    v += [FieldViolation(f"{prefix}.rotation_id", p) for p in id_problems(rotation_id)]
    if not members:
        v.append(FieldViolation(f"{prefix}.members", "at least one member is required"))
    elif len(members) > MEMBERS_MAX:
        v.append(FieldViolation(f"{prefix}.members", f"at most {MEMBERS_MAX} members"))
    for i, member in enumerate(members[:MEMBERS_MAX]):
        v += [FieldViolation(f"{prefix}.members[{i}]", p) for p in id_problems(member)]
    if start is None:
        v.append(FieldViolation(f"{prefix}.start_time", "is required"))
    elif problem := time_problem(start):
        v.append(FieldViolation(f"{prefix}.start_time", problem))
    if shift is None:
        v.append(FieldViolation(f"{prefix}.shift", "is required"))
    elif shift <= timedelta(0):
        v.append(FieldViolation(f"{prefix}.shift", "must be positive"))
    elif shift > SHIFT_MAX or shift % timedelta(seconds=1):
        v.append(FieldViolation(f"{prefix}.shift", "must be whole seconds, at most 366 days"))
    problem = zone_problem(time_zone)
    if problem:
        v.append(FieldViolation(f"{prefix}.time_zone", problem))
    if len(overrides) > OVERRIDES_MAX:
        v.append(FieldViolation(f"{prefix}.overrides", f"at most {OVERRIDES_MAX} overrides"))
    built: list[Override] = []
    for i, (who, begin, end) in enumerate(overrides[:OVERRIDES_MAX]):
        at = f"{prefix}.overrides[{i}]"
        v += [FieldViolation(f"{at}.recipient_id", p) for p in id_problems(who)]
        for name, instant in (("start_time", begin), ("end_time", end)):
            if instant is None:
                v.append(FieldViolation(f"{at}.{name}", "is required"))
            elif problem := time_problem(instant):
                v.append(FieldViolation(f"{at}.{name}", problem))
        if begin is not None and end is not None:
            if end <= begin:
                v.append(FieldViolation(f"{at}.end_time", "must be after start_time"))
            built.append(Override(who, begin, end))
    _raise(v)
    assert start is not None and shift is not None
    return Rotation(rotation_id, tuple(members), start, shift, time_zone, tuple(built))
