"""Who of a rotation is on call at an instant, and until when (``GetOnCall``).

Shifts. Shift ``k`` (any integer: before ``start`` the rotation counts backwards)
belongs to ``members[k mod len(members)]`` and begins at ``boundary(k)``:

- a shift of a whole number of days is counted in **local wall-clock days** of the
  rotation's zone: ``boundary(k)`` is the first instant the local clock reads the
  start's wall time on the start's local date plus ``k * days``. A daily shift that
  starts at 09:00 Europe/Paris hands off at 09:00 local on both sides of a
  daylight-saving change, so the shift that spans the change lasts 23 or 25 hours.
  A wall time the change skips (02:30 on a spring-forward night) is read with the
  offset before the change (03:30 after it); a repeated one (fall back) is its first
  occurrence. Boundaries stay strictly increasing (a local day is at least 23 h).
- any other shift (8 h, 36 h) is counted in elapsed time: ``start + k * shift``.
  Local wall-clock arithmetic for those would make shifts of 7 or 9 hours.

Overrides. An override puts its person on call in ``[start, end)``. Where overrides
overlap, the one later in the rotation's list wins (an operator appends a swap over a
holiday cover); they are not refused, since both are often entered by different
people.

``until`` is the first instant after ``t`` at which someone else is on call, found by
walking the change points (shift boundaries, override starts and ends); if the same
person stays on call across ``_SEARCH_STEPS`` change points (a one-member rotation),
it is the next change point. Either way the person is the same at every instant of
``[t, until)`` and ``until > t``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from uns_server.domain.people import Rotation
from uns_server.domain.targets import Target

_DAY = timedelta(days=1)
_SEARCH_STEPS = 256


@dataclass(frozen=True)
class OnCall:
    """The answer for one instant."""

    recipient_id: str
    until: datetime
    """First instant after the asked one at which another person is on call (or the
    next change point, see the module docstring)."""
    override: bool
    next_recipient_id: str
    """Who is on call at ``until``."""


def _whole_days(shift: timedelta) -> int | None:
    if shift % _DAY:
        return None
    return shift // _DAY


def boundary(rotation: Rotation, k: int) -> datetime:
    """When shift ``k`` begins (UTC)."""
    days = _whole_days(rotation.shift)
    if days is None:
        return rotation.start.astimezone(UTC) + k * rotation.shift
    zone = rotation.zone
    local = rotation.start.astimezone(zone)
    wall = local.replace(tzinfo=None) + timedelta(days=k * days)
    # fold=0: a skipped wall time takes the offset before the change (later instant),
    # a repeated one is its first occurrence.
    return wall.replace(tzinfo=zone, fold=0).astimezone(UTC)


def shift_index(rotation: Rotation, t: datetime) -> int:
    """The ``k`` with ``boundary(k) <= t < boundary(k + 1)``."""
    t = t.astimezone(UTC)
    start = rotation.start.astimezone(UTC)
    days = _whole_days(rotation.shift)
    if days is None:
        return (t - start) // rotation.shift
    # Elapsed-time estimate (off by at most one, since local days are 23-25 h and a
    # DST change moves a boundary by at most a few hours), then correct.
    k = (t - start) // rotation.shift
    while boundary(rotation, k) > t:
        k -= 1
    while boundary(rotation, k + 1) <= t:
        k += 1
    return k


def _override_at(rotation: Rotation, t: datetime) -> str | None:
    for o in reversed(rotation.overrides):
        if o.start <= t < o.end:
            return o.recipient_id
    return None


def _who(rotation: Rotation, t: datetime) -> tuple[str, bool]:
    by_override = _override_at(rotation, t)
    if by_override is not None:
        return by_override, True
    k = shift_index(rotation, t)
    return rotation.members[k % len(rotation.members)], False


def _next_change(rotation: Rotation, t: datetime) -> datetime:
    """The first change point after ``t``: a shift boundary or an override edge."""
    candidate = boundary(rotation, shift_index(rotation, t) + 1)
    for o in rotation.overrides:
        for edge in (o.start, o.end):
            if t < edge < candidate:
                candidate = edge
    return candidate


def on_call(rotation: Rotation, t: datetime) -> OnCall:
    """Who is on call at ``t`` (aware datetime), until when, and who is next."""
    t = t.astimezone(UTC)
    who, by_override = _who(rotation, t)
    point = first = _next_change(rotation, t)
    for _ in range(_SEARCH_STEPS):
        nxt, _o = _who(rotation, point)
        if nxt != who:
            return OnCall(who, point, by_override, nxt)
        point = _next_change(rotation, point)
    return OnCall(who, first, by_override, _who(rotation, first)[0])


def resolve_targets(
    targets: Sequence[Target], at: datetime, rotations: Mapping[str, Rotation]
) -> tuple[str, ...]:
    """The people ``targets`` ask at ``at``, in order, each once: a person as named,
    a rotation as whoever is on call then. A rotation missing from ``rotations``
    (deleted since the policy was written) asks nobody; the caller records that."""
    out: dict[str, None] = {}
    for target in targets:
        if target.recipient_id:
            out[target.recipient_id] = None
            continue
        rotation = rotations.get(target.rotation_id)
        if rotation is not None and rotation.members:
            out[on_call(rotation, at).recipient_id] = None
    return tuple(out)
