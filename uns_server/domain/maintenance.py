"""Maintenance windows (SPEC §7 "Quiet on purpose"): planned quiet. Pure.

A window holds the notifications of its types that are accepted, or fall due (a
retry, a scheduled send), while it is open (``start <= t < end``): such a
notification stays PENDING, due again at the window's end, its hold
(``held_until``, ``held_by_window_id``) on its row and an EVENT_KIND_HELD event
saying why. SAFETY intent is never held. A hold spends no attempt.

    accepted, due now, a window open  --> inserted due at the window's end, held
    claimed (due), a window open      --> lease and attempt given back, due at the end
    the window's end (its job)        --> every row it held due now, the hold cleared
    the window ended early            --> the same at once (Delete; a Put moving it)

The window's end is a timer of the work table (kind ``window_end``, ``end_job``),
inserted by every put and delete, due at the end; a due job whose window has moved
later is stale and does nothing (the put that moved it inserted the later one).

Which window holds a type is asked of the windows in memory (``holding``), so the
claim, the hot path, reads nothing more; a hit is checked against the stored window
in the same transaction before anything is held.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from uns_server.domain.enums import Intent
from uns_server.domain.errors import FieldViolation, InvalidRequest
from uns_server.domain.fields import text_problems, time_problem
from uns_server.domain.jobs import JobKind, NewJob
from uns_server.domain.people import id_problems
from uns_server.domain.records import Job
from uns_server.domain.validation import _notification_type

TYPES_MAX = 100
REASON_MAX_CHARS = 1000
END_KIND = JobKind.WINDOW_END
# Each attempt is one transaction that releases and settles (``services.maintenance``).
END_MAX_ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class MaintenanceWindow:
    window_id: str
    start_time: datetime
    end_time: datetime
    notification_types: tuple[str, ...]
    reason: str = ""
    updated_by: str = ""
    updated_at: datetime | None = None

    def is_open(self, at: datetime) -> bool:
        return self.start_time <= at < self.end_time

    def matches(self, notification_type: str) -> bool:
        return any(type_matches(p, notification_type) for p in self.notification_types)

    def to_json(self) -> dict[str, object]:
        """The content an audit record keeps."""
        return {
            "window_id": self.window_id,
            "start_time": self.start_time.isoformat(),
            "end_time": self.end_time.isoformat(),
            "notification_types": list(self.notification_types),
            "reason": self.reason,
        }


def type_matches(pattern: str, notification_type: str) -> bool:
    """An exact name, or a prefix ending in ``*`` (``db.*``; ``*`` alone: every type)."""
    if pattern.endswith("*"):
        return notification_type.startswith(pattern[:-1])
    return notification_type == pattern


def holds(
    window: MaintenanceWindow, notification_type: str, intent: str | None, at: datetime
) -> bool:
    """Does ``window`` hold a notification of this type and intent due at ``at``?"""
    return intent != Intent.SAFETY and window.is_open(at) and window.matches(notification_type)


def holding(
    windows: Iterable[MaintenanceWindow], notification_type: str, intent: str | None, at: datetime
) -> MaintenanceWindow | None:
    """The window that holds such a notification at ``at``; of several, the one that
    ends last (it is held until every window holding it has ended)."""
    found = [w for w in windows if holds(w, notification_type, intent, at)]
    return max(found, key=lambda w: (w.end_time, w.window_id), default=None)


def held_payload(window: MaintenanceWindow) -> dict[str, object]:
    """The EVENT_KIND_HELD payload: which window, until when, why."""
    return {
        "window_id": window.window_id,
        "held_until": window.end_time.isoformat(),
        "reason": window.reason,
    }


def build_window(
    window_id: str,
    start_time: datetime | None,
    end_time: datetime | None,
    notification_types: Sequence[str],
    reason: str,
    *,
    prefix: str = "window.",
) -> MaintenanceWindow:
    """A validated window; INVALID_REQUEST naming every field (``window.<field>``)."""
    violations: list[FieldViolation] = []

    def bad(field: str, problem: str) -> None:
        violations.append(FieldViolation(prefix + field, problem))

    for problem in id_problems(window_id):
        bad("window_id", problem)
    for name, value in (("start_time", start_time), ("end_time", end_time)):
        if value is None:
            bad(name, "is required")
        elif (wrong := time_problem(value)) is not None:
            bad(name, wrong)
    if start_time is not None and end_time is not None and end_time <= start_time:
        bad("end_time", "must be after start_time")
    if not notification_types:
        bad("notification_types", "is required (at least one type or pattern)")
    elif len(notification_types) > TYPES_MAX:
        bad("notification_types", f"must be at most {TYPES_MAX}")
    else:
        for i, pattern in enumerate(notification_types):
            for problem in pattern_problems(pattern):
                bad(f"notification_types[{i}]", problem)
    for problem in text_problems(reason, REASON_MAX_CHARS):
        bad("reason", problem)
    if violations:
        fields = ",".join(dict.fromkeys(v.field for v in violations))
        first = violations[0]
        raise InvalidRequest(
            f"{first.field}: {first.description}"
            + (f" (and {len(violations) - 1} more)" if len(violations) > 1 else ""),
            metadata={"fields": fields},
            violations=violations,
        )
    assert start_time is not None and end_time is not None
    return MaintenanceWindow(
        window_id, start_time, end_time, tuple(dict.fromkeys(notification_types)), reason
    )


def pattern_problems(pattern: str) -> list[str]:
    """A notification type, or a prefix of one followed by a single trailing ``*``."""
    if pattern == "*":
        return []
    name = pattern[:-1] if pattern.endswith("*") else pattern
    if "*" in name:
        return ["only a trailing '*' is allowed (e.g. 'db.*')"]
    return _notification_type(name)


def end_job(window: MaintenanceWindow) -> NewJob:
    """The timer that releases the window's held work at its end."""
    return NewJob(
        END_KIND, {"window_id": window.window_id}, END_MAX_ATTEMPTS, scheduled_at=window.end_time
    )


def window_of(job: Job) -> str:
    window_id = job.args.get("window_id")
    return window_id if isinstance(window_id, str) else ""


def releases(window: MaintenanceWindow | None, now: datetime) -> bool:
    """Does a due end timer release its window's held work? Yes once the window is
    gone or has ended; no when it was moved later (stale: its own timer comes)."""
    return window is None or window.end_time <= now


@dataclass(frozen=True, slots=True)
class ClaimHold:
    """A claimed leader a window holds: its lease released and the claim's attempt
    given back (the counters as before the claim), due again at ``until``. Applied
    only while ``token`` still holds the lease."""

    notification_id: str
    token: str
    window_id: str
    until: datetime
    attempts: int
    cycle_attempts: int


@dataclass(frozen=True, slots=True)
class WindowChange:
    """One audit record of a window: who put or deleted it, when, and its content."""

    window_id: str
    action: str  # PUT | DELETE
    actor: str
    content: dict[str, object]
    created_at: datetime
