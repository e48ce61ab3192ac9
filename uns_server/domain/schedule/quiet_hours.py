"""Quiet hours: when a step may be sent (``PolicySpec.quiet_hours``, SPEC §5).

Quiet hours are wall-clock times in an IANA zone (``zoneinfo``, data from ``tzdata``).
An instant is quiet when its local wall time lies in ``[start, end)`` (a window with
``start > end`` wraps midnight). The window ends at the first instant whose wall time
reads ``end`` or later, so on a spring-forward day an ``end`` inside the skipped hour
ends the window at the jump, and on a fall-back day at the first of the two readings.
SAFETY and ESCALATION notifications are never held.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from uns_server.domain.enums import Intent
from uns_server.domain.errors import FieldViolation
from uns_server.domain.fields import zone_problem

# Intents that are never held by quiet hours.
QUIET_EXEMPT = frozenset({Intent.SAFETY, Intent.ESCALATION})


@dataclass(frozen=True)
class QuietHours:
    """``PolicySpec.quiet_hours``: local wall-clock window ``[start, end)`` in a zone."""

    time_zone: str
    start: time
    end: time

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.time_zone)

    @classmethod
    def parse(
        cls, time_zone: str, start: str, end: str, field: str
    ) -> tuple[QuietHours | None, list[FieldViolation]]:
        """Operator input (``"22:00"``, ``"07:30"``) to a value, or the violations."""
        violations: list[FieldViolation] = []
        problem = zone_problem(time_zone)
        if problem is not None:
            violations.append(FieldViolation(f"{field}.time_zone", problem))
        times: list[time] = []
        for name, text in (("start", start), ("end", end)):
            parsed = _parse_wall_time(text)
            if parsed is None:
                violations.append(FieldViolation(f"{field}.{name}", "must be HH:MM (00:00-23:59)"))
            else:
                times.append(parsed)
        if len(times) == 2 and times[0] == times[1]:
            violations.append(FieldViolation(f"{field}.end", "must differ from start"))
        if violations:
            return None, violations
        return cls(time_zone, times[0], times[1]), []

    def to_json(self) -> dict[str, str]:
        return {
            "time_zone": self.time_zone,
            "start": self.start.strftime("%H:%M"),
            "end": self.end.strftime("%H:%M"),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> QuietHours:
        start, end = _parse_wall_time(data["start"]), _parse_wall_time(data["end"])
        assert start is not None and end is not None
        return cls(str(data["time_zone"]), start, end)


def _parse_wall_time(text: str) -> time | None:
    parts = text.split(":")
    if len(parts) != 2 or not all(p.isdigit() and len(p) == 2 for p in parts):
        return None
    hour, minute = int(parts[0]), int(parts[1])
    if hour > 23 or minute > 59:
        return None
    return time(hour, minute)


def _wall(t: datetime, zone: ZoneInfo) -> time:
    return t.astimezone(zone).time().replace(tzinfo=None, fold=0)


def is_quiet(t: datetime, quiet: QuietHours) -> bool:
    """Does ``t``'s local wall time fall inside the window?"""
    wall = _wall(t, quiet.zone)
    if quiet.start < quiet.end:
        return quiet.start <= wall < quiet.end
    return wall >= quiet.start or wall < quiet.end


def _first_instant_reading(day: date, wall: time, zone: ZoneInfo, after: datetime) -> datetime:
    """The first instant after ``after`` at which the local clock on ``day`` reads
    ``wall`` (or jumps past it)."""
    early = datetime.combine(day, wall.replace(fold=0), tzinfo=zone).astimezone(UTC)
    late = datetime.combine(day, wall.replace(fold=1), tzinfo=zone).astimezone(UTC)
    if early <= late:  # the wall time exists (once, or twice on a fall-back day)
        return early if early > after else late
    # Inside a spring-forward gap: the answer is the jump, between the two readings
    # (zone transitions fall on whole seconds, so bisect over seconds).
    target = datetime.combine(day, wall)
    lo, hi = math.floor(late.timestamp()), math.ceil(early.timestamp())
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if datetime.fromtimestamp(mid, zone).replace(tzinfo=None) >= target:
            hi = mid
        else:
            lo = mid
    return datetime.fromtimestamp(hi, UTC)


def next_allowed(t: datetime, quiet: QuietHours | None, intent: str | None) -> datetime:
    """``t``, or the end of the quiet window ``t`` falls in. SAFETY and ESCALATION
    notifications are never held."""
    if quiet is None or intent in QUIET_EXEMPT:
        return t
    zone = quiet.zone
    # A fall-back day can re-enter a window right after it ended: a few rounds suffice.
    for _ in range(4):
        if not is_quiet(t, quiet):
            return t
        local = t.astimezone(zone)
        day = local.date()
        if quiet.start > quiet.end and _wall(t, zone) >= quiet.start:
            day += timedelta(days=1)
        t = max(t, _first_instant_reading(day, quiet.end, zone, t))
    return t


def held_until(
    quiet_by_key: Mapping[str, QuietHours | None], now: datetime, intent: str | None
) -> dict[str, datetime]:
    """Of messages keyed by route, those a person's own quiet hours hold at ``now``,
    each with when the hold ends (``next_allowed``: SAFETY and ESCALATION are never
    held). A message whose person has no quiet hours, or is awake, is not listed."""
    out: dict[str, datetime] = {}
    for key, quiet in quiet_by_key.items():
        until = next_allowed(now, quiet, intent)
        if until > now:
            out[key] = until
    return out
