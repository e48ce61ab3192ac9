"""Per-person reminders (SPEC §6; seed 003's nag state): each person's reminders taper
on their own count, not the obligation's.

A reminder step (``follow_up_steps``) fires at the obligation's times and reminds each
person it asks only when that person is due on their own schedule::

    due = last_asked + first_after * multiplier ** reminded      (while reminded < max_count)

``reminded`` is how many reminders that person has been sent for this obligation and
``last_asked`` when they were last sent any of its messages (the delivery, a reminder,
an escalation step; a follow-up counts from its planned time, so a person asked at the
delivery is due at exactly the obligation's reminder times). A person never asked is
due at once. A person not due yet waits for a later reminder step; one who has had
``max_count`` reminders gets no more. So a person first paged by an escalation step,
or after a rotation hand-off, is not nagged at the pace of those asked before them.

The state is read from the references of the messages sent (``provider_refs``: one per
message and contact; a reminder counts once per number), so it needs no table of its
own and ends with the obligation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from uns_server.domain.outcomes import ProviderRefs
from uns_server.domain.schedule.follow_up_steps import Reminder, StepKind


@dataclass(frozen=True)
class NagState:
    """One person's reminders so far for one obligation."""

    last_asked: datetime
    reminded: int


def nag_states(refs: ProviderRefs) -> dict[str, NagState]:
    """Each person's state, from the references of the messages sent to them."""
    last: dict[str, datetime] = {}
    numbers: dict[str, set[int]] = {}
    for ref in refs.values():
        at = ref.due_time or ref.at
        if not ref.recipient_id or at is None:
            continue  # a channel's own message, or an entry without its time
        if ref.follow_up == StepKind.SNOOZE_REMINDER.value:
            continue  # a snooze's reminder leaves the policy's later reminders their times
        rid = ref.recipient_id
        last[rid] = max(at, last.get(rid, at))
        if ref.follow_up == StepKind.REMINDER.value:
            numbers.setdefault(rid, set()).add(ref.follow_up_number)
    return {rid: NagState(at, len(numbers.get(rid, ()))) for rid, at in last.items()}


def reminder_due(reminder: Reminder, state: NagState) -> datetime | None:
    """When a person in ``state`` is due their next reminder; None when they have had
    ``max_count`` (or the tapered interval outgrows the calendar)."""
    if state.reminded >= reminder.max_count:
        return None
    try:
        return state.last_asked + reminder.first_after * reminder.multiplier**state.reminded
    except OverflowError:
        return None


def not_due(
    reminder: Reminder, states: Mapping[str, NagState], people: Iterable[str], now: datetime
) -> dict[str, datetime | None]:
    """Of the ``people`` a reminder step asks at ``now``, those not due yet: each with
    when they are due (None: no reminder left for them)."""
    out: dict[str, datetime | None] = {}
    for rid in people:
        state = states.get(rid)
        if state is None:
            continue  # never asked: the reminder is the first message they get
        due = reminder_due(reminder, state)
        if due is None or due > now:
            out[rid] = due
    return out
