"""Managing policy revisions: the one implementation behind ``uns.v1.PolicyService``
and ``uns-admin policies``.

Revisions are immutable; putting content identical to the latest revision returns it
unchanged. Activation swaps the type's ACTIVE pointer; notifications already accepted
keep the policy they froze. Listing is newest first with AIP-158 paging; the page
token is an opaque encoding of the last revision returned (and its type).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, TypeVar

from uns_server.domain import paging
from uns_server.domain.enums import DeliveryMode, Priority
from uns_server.domain.errors import FieldViolation, InvalidRequest, NotFound
from uns_server.domain.policy import PolicyRevision, PolicySpec
from uns_server.domain.schedule import EscalationStep, Reminder
from uns_server.domain.validation import _notification_type
from uns_server.store import policies
from uns_server.store.db import Database

Clock = Callable[[], datetime]
E = TypeVar("E", bound=StrEnum)

# Two first puts of one new type race on the unique notification_type; the loser
# retries and then sees the winner's row.
_INSERT_RACE_RETRIES = 3
_TOKEN_VERSION = 1
_INT32_MAX = 2**31 - 1  # revisions are int32 on the wire and in the table


@dataclass(frozen=True)
class PolicyInput:
    """One revision to write: a notification type and its validated content."""

    notification_type: str
    spec: PolicySpec


def validate_type(notification_type: str, field: str = "notification_type") -> str:
    problems = _notification_type(notification_type)
    if problems:
        raise InvalidRequest(
            f"{field}: {'; '.join(problems)}",
            metadata={"fields": field},
            violations=[FieldViolation(field, p) for p in problems],
        )
    return notification_type


def encode_page_token(notification_type: str, last_revision: int) -> str:
    return paging.encode_token(_TOKEN_VERSION, notification_type, last_revision)


def decode_page_token(token: str, notification_type: str) -> int:
    """The last revision of the previous page; INVALID_REQUEST on a foreign token."""
    try:
        version, token_type, last = paging.decode_token(token, 3)
        if isinstance(last, bool) or not isinstance(last, int) or not 1 <= last <= _INT32_MAX:
            raise ValueError(token)
        if version != _TOKEN_VERSION:
            raise ValueError(token)
    except ValueError:
        raise InvalidRequest.of_field("page_token", "not a token from this server") from None
    if token_type != notification_type:
        raise InvalidRequest.of_field(
            "page_token", "the token belongs to a different notification_type"
        )
    return last


class PolicyService:
    def __init__(self, db: Database, clock: Clock) -> None:
        self._db = db
        self._clock = clock

    async def put(self, actor: str, item: PolicyInput, *, activate: bool = False) -> PolicyRevision:
        """Write one revision (or return the identical latest one); optionally activate it."""
        return (await self.put_many(actor, [item], activate=activate))[0]

    async def put_many(
        self, actor: str, items: Sequence[PolicyInput], *, activate: bool = False
    ) -> list[PolicyRevision]:
        """Write several revisions in one transaction: all of them or none."""
        for item in items:
            validate_type(item.notification_type)
        for attempt in range(_INSERT_RACE_RETRIES):
            try:
                return await self._put_once(actor, items, activate)
            except policies.FirstPutRace:
                if attempt == _INSERT_RACE_RETRIES - 1:
                    raise
        raise AssertionError("unreachable")

    async def _put_once(
        self, actor: str, items: Sequence[PolicyInput], activate: bool
    ) -> list[PolicyRevision]:
        now = self._clock()
        written: list[PolicyRevision] = []
        async with self._db.write() as tx:
            for item in items:
                revision = await policies.put_revision(
                    tx.conn, item.notification_type, item.spec, actor=actor, now=now
                )
                if activate and not revision.active:
                    activated = await policies.activate(
                        tx.conn, item.notification_type, revision.revision, now=now
                    )
                    assert activated is not None
                    revision = activated
                written.append(revision)
        return written

    async def activate(self, notification_type: str, revision: int) -> PolicyRevision:
        """Make ``revision`` the ACTIVE one; activating the ACTIVE revision changes nothing."""
        validate_type(notification_type)
        if revision < 1:
            raise InvalidRequest.of_field("revision", "must be a revision number (1 or more)")
        async with self._db.write() as tx:
            current = await policies.get(tx.conn, notification_type, revision)
            if current is None:
                raise _not_found(notification_type, revision)
            if current.active:
                return current
            activated = await policies.activate(
                tx.conn, notification_type, revision, now=self._clock()
            )
            assert activated is not None
            return activated

    async def get(self, notification_type: str, revision: int = 0) -> PolicyRevision:
        """The ACTIVE revision (``revision`` 0) or the given one; NOT_FOUND otherwise."""
        validate_type(notification_type)
        if revision < 0:
            raise InvalidRequest.of_field(
                "revision", "must be 0 (the ACTIVE revision) or a revision number"
            )
        async with self._db.read() as conn:
            if revision == 0:
                found = await policies.active(conn, notification_type)
            else:
                found = await policies.get(conn, notification_type, revision)
        if found is None:
            raise _not_found(notification_type, revision)
        return found

    async def list(
        self, notification_type: str, page_size: int = 0, page_token: str = ""
    ) -> tuple[list[PolicyRevision], str]:
        """One page of revisions, newest first, and the next page's token ("" at the end).

        An unknown type is an empty list, not NOT_FOUND: a type has revisions or not.
        """
        validate_type(notification_type)
        limit = paging.page_limit(page_size)
        before = decode_page_token(page_token, notification_type) if page_token else None
        async with self._db.read() as conn:
            rows = await policies.list_revisions(
                conn, notification_type, before_revision=before, limit=limit + 1
            )
        if len(rows) <= limit:
            return rows, ""
        rows = rows[:limit]
        return rows, encode_page_token(notification_type, rows[-1].revision)


def _not_found(notification_type: str, revision: int) -> NotFound:
    if revision == 0:
        return NotFound(
            f"no ACTIVE policy for {notification_type}",
            metadata={"notification_type": notification_type},
        )
    return NotFound(
        f"no revision {revision} of the policy for {notification_type}",
        metadata={"notification_type": notification_type, "revision": str(revision)},
    )


# --- Documents (uns-admin files): the same shape as uns.v1.PolicySpec, as JSON/YAML. ---

_SPEC_FIELDS = (
    "channels",
    "delivery_mode",
    "require_ack",
    "ack_timeout_minutes",
    "priority",
    "dedup_window_seconds",
    "max_attempts",
    "quiet_hours",
    "reminder",
    "escalation",
)


def inputs_from_document(document: Any) -> list[PolicyInput]:
    """``{notification_type, spec}`` or a list of them -> validated inputs.

    Enum values are names, with or without their wire prefix (``GUARANTEED`` or
    ``DELIVERY_MODE_GUARANTEED``). Raises ``InvalidRequest`` listing every problem,
    fields named ``[i].spec.channels`` etc. for lists.
    """
    entries = document if isinstance(document, list) else [document]
    if not entries:
        raise InvalidRequest.of_field("policies", "the file holds no policy")
    many = isinstance(document, list)
    violations: list[FieldViolation] = []
    inputs: list[PolicyInput] = []
    for i, entry in enumerate(entries):
        at = f"[{i}]." if many else ""
        try:
            inputs.append(_input_from_entry(entry, at))
        except InvalidRequest as exc:
            violations.extend(exc.violations)
    if violations:
        fields = ",".join(dict.fromkeys(v.field for v in violations))
        raise InvalidRequest(
            "; ".join(f"{v.field}: {v.description}" for v in violations),
            metadata={"fields": fields},
            violations=violations,
        )
    return inputs


def _input_from_entry(entry: Any, at: str) -> PolicyInput:
    if not isinstance(entry, Mapping):
        raise InvalidRequest.of_field(
            at.rstrip(".") or "policy", "must be a mapping {notification_type, spec}"
        )
    violations: list[FieldViolation] = []
    unknown = sorted(set(entry) - {"notification_type", "spec"})
    violations += [FieldViolation(f"{at}{k}", "unknown field") for k in unknown]
    notification_type = entry.get("notification_type")
    if not isinstance(notification_type, str):
        violations.append(FieldViolation(f"{at}notification_type", "must be a string"))
    else:
        violations += [
            FieldViolation(f"{at}notification_type", p)
            for p in _notification_type(notification_type)
        ]
    spec: PolicySpec | None = None
    raw = entry.get("spec")
    if not isinstance(raw, Mapping):
        violations.append(FieldViolation(f"{at}spec", "must be a mapping"))
    else:
        try:
            spec = spec_from_mapping(raw)
        except InvalidRequest as exc:
            violations += [FieldViolation(at + v.field, v.description) for v in exc.violations]
    if violations or spec is None or not isinstance(notification_type, str):
        raise InvalidRequest(violations=violations)
    return PolicyInput(notification_type, spec)


def spec_from_mapping(raw: Mapping[str, Any]) -> PolicySpec:
    """A JSON/YAML spec -> ``PolicySpec.build`` (fields named ``spec.<field>``)."""
    violations: list[FieldViolation] = [
        FieldViolation(f"spec.{k}", "unknown field") for k in sorted(set(raw) - set(_SPEC_FIELDS))
    ]
    channels = raw.get("channels", [])
    if isinstance(channels, str) or not isinstance(channels, list):
        violations.append(FieldViolation("spec.channels", "must be a list of channel names"))
        channels = []
    elif not all(isinstance(c, str) for c in channels):
        violations.append(FieldViolation("spec.channels", "must be a list of channel names"))
        channels = [str(c) for c in channels]
    delivery_mode = _enum(raw, "delivery_mode", DeliveryMode, "DELIVERY_MODE_", violations)
    priority = _enum(raw, "priority", Priority, "PRIORITY_", violations)
    require_ack = raw.get("require_ack", False)
    if not isinstance(require_ack, bool):
        violations.append(FieldViolation("spec.require_ack", "must be true or false"))
        require_ack = False
    numbers: dict[str, int] = {}
    for name in ("ack_timeout_minutes", "dedup_window_seconds", "max_attempts"):
        value = raw.get(name, 0)
        if isinstance(value, bool) or not isinstance(value, int):
            violations.append(FieldViolation(f"spec.{name}", "must be an integer"))
            value = 0
        numbers[name] = value
    quiet_hours = _quiet_hours(raw.get("quiet_hours"), violations)
    reminder = _reminder(raw.get("reminder"), violations)
    escalation = _escalation(raw.get("escalation"), violations)
    try:
        spec = PolicySpec.build(
            channels,
            delivery_mode,
            require_ack,
            priority=priority,
            ack_timeout_minutes=numbers["ack_timeout_minutes"],
            dedup_window_seconds=numbers["dedup_window_seconds"],
            max_attempts=numbers["max_attempts"],
            quiet_hours=quiet_hours,
            reminder=reminder,
            escalation=escalation,
        )
    except InvalidRequest as exc:
        # delivery_mode is reported once, by _enum, when it was present but wrong.
        seen = {v.field for v in violations}
        violations += [v for v in exc.violations if v.field not in seen]
    if violations:
        fields = ",".join(dict.fromkeys(v.field for v in violations))
        raise InvalidRequest(metadata={"fields": fields}, violations=violations)
    return spec


def _quiet_hours(value: Any, violations: list[FieldViolation]) -> dict[str, str] | None:
    """``{time_zone, start, end}`` (times as "HH:MM" text; validated by the domain)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        violations.append(FieldViolation("spec.quiet_hours", "must be {time_zone, start, end}"))
        return None
    violations += [
        FieldViolation(f"spec.quiet_hours.{k}", "unknown field")
        for k in sorted(set(value) - {"time_zone", "start", "end"})
    ]
    out = {}
    for name in ("time_zone", "start", "end"):
        item = value.get(name, "")
        if isinstance(item, int) and name != "time_zone":  # YAML 1.1 reads 22:00 as 1320
            item = f"{item // 60:02d}:{item % 60:02d}"
        if not isinstance(item, str):
            violations.append(FieldViolation(f"spec.quiet_hours.{name}", "must be text"))
            item = ""
        out[name] = item
    return out


def _reminder(value: Any, violations: list[FieldViolation]) -> Reminder | None:
    """``{first_after, multiplier, max_count}``; durations as in :func:`parse_duration`."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        violations.append(
            FieldViolation("spec.reminder", "must be {first_after, multiplier, max_count}")
        )
        return None
    violations += [
        FieldViolation(f"spec.reminder.{k}", "unknown field")
        for k in sorted(set(value) - {"first_after", "multiplier", "max_count"})
    ]
    first_after = _duration(value.get("first_after"), "spec.reminder.first_after", violations)
    multiplier = value.get("multiplier", 1)
    if isinstance(multiplier, bool) or not isinstance(multiplier, int | float):
        violations.append(FieldViolation("spec.reminder.multiplier", "must be a number"))
        multiplier = 1
    max_count = value.get("max_count", 1)
    if isinstance(max_count, bool) or not isinstance(max_count, int):
        violations.append(FieldViolation("spec.reminder.max_count", "must be an integer"))
        max_count = 1
    if first_after is None:
        return None
    return Reminder(first_after, float(multiplier or 1), max_count)


def _escalation(value: Any, violations: list[FieldViolation]) -> list[EscalationStep]:
    """``[{after, channels}]``."""
    if value is None:
        return []
    if not isinstance(value, list):
        violations.append(FieldViolation("spec.escalation", "must be a list of {after, channels}"))
        return []
    steps = []
    for i, item in enumerate(value):
        at = f"spec.escalation[{i}]"
        if not isinstance(item, Mapping):
            violations.append(FieldViolation(at, "must be {after, channels}"))
            continue
        violations += [
            FieldViolation(f"{at}.{k}", "unknown field")
            for k in sorted(set(item) - {"after", "channels"})
        ]
        after = _duration(item.get("after"), f"{at}.after", violations)
        channels = item.get("channels", [])
        if not isinstance(channels, list) or not all(isinstance(c, str) for c in channels):
            violations.append(FieldViolation(f"{at}.channels", "must be a list of channel names"))
            channels = []
        if after is not None:
            steps.append(EscalationStep(after, tuple(dict.fromkeys(channels))))
    return steps


_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: Any) -> timedelta | None:
    """Seconds as a number, or text: ``"90s"``, ``"15m"``, ``"2h"``, ``"1d"`` (also the
    protobuf JSON form ``"900s"``, and fractions such as ``"1.5h"``). None if unreadable."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return timedelta(seconds=value)
    if isinstance(value, str) and len(value) > 1 and value[-1] in _DURATION_UNITS:
        try:
            return timedelta(seconds=float(value[:-1]) * _DURATION_UNITS[value[-1]])
        except (ValueError, OverflowError):
            return None
    return None


def _duration(value: Any, field: str, violations: list[FieldViolation]) -> timedelta | None:
    duration = parse_duration(value)
    if duration is None:
        violations.append(
            FieldViolation(field, 'must be a duration: seconds, or "90s", "15m", "2h", "1d"')
        )
    return duration


def _enum(
    raw: Mapping[str, Any],
    name: str,
    cls: type[E],
    prefix: str,
    violations: list[FieldViolation],
) -> E | None:
    value = raw.get(name)
    if value is None:
        return None
    if isinstance(value, str):
        try:
            return cls(value.strip().upper().removeprefix(prefix))
        except ValueError:
            pass
    choices = ", ".join(m.value for m in cls)
    violations.append(FieldViolation(f"spec.{name}", f"must be one of {choices}"))
    return None


def revision_to_json(revision: PolicyRevision) -> dict[str, Any]:
    """A plain JSON view of a revision (uns-admin output)."""
    return {
        "policy_id": revision.policy_id,
        "notification_type": revision.notification_type,
        "revision": revision.revision,
        "state": "ACTIVE" if revision.active else "INACTIVE",
        "spec": revision.spec.to_json(),
        "content_hash": revision.content_hash,
        "created_by": revision.created_by,
        "create_time": revision.created_at.isoformat(),
        "activate_time": revision.activated_at.isoformat() if revision.activated_at else None,
    }
