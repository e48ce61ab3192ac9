"""The obligation over time: when each planned step is due (SPEC §5, issue 25).

Pure: instants and policy values in, instants and decisions out. The same functions
serve the workers (intake's first attempt, the follow-up worker's reminders and
escalation steps) and Simulate's ``planned_steps``, so the plan a producer is shown
and what the server does cannot drift apart.

Timeline of one obligation, all offsets from the instant ``t0`` it was accepted::

    t0 --(schedule_time, if later)--> first attempt --delivered at d-->
        reminder k at  d + first_after * (1 + m + ... + m^(k-1)),  k = 1..max_count
        step i     at  d + escalation[i].after  (+ p * max(after) in loop p, p <= escalation_loops)
        deadline   at  d + ack_timeout_minutes          (TIMED_OUT, unchanged)

One module per concern, all re-exported here (callers write ``schedule.plan``):

- ``quiet_hours``: :class:`QuietHours`, :func:`is_quiet`, :func:`next_allowed`, which
  holds every step but the deadline inside the policy's quiet window, and
  :func:`held_until`, which holds a person's own messages inside their quiet window;
- ``follow_up_steps``: reminders and escalation steps after delivery, the follow-up worker's
  :func:`decide_follow_up` and :func:`after_fired`;
- ``nagging``: each person's reminders tapered on their own count (:func:`not_due`);
- ``step_retry``: a step whose provider call failed transiently, retried on the failing
  channels alone (:func:`decide_step_attempt`);
- ``planning``: scheduled sends (:func:`first_attempt_at`) and Simulate's :func:`plan`.
"""

from uns_server.domain.schedule.follow_up_steps import (
    ESCALATION_LOOPS_MAX,
    ESCALATION_STEPS_MAX,
    REMINDER_FIRST_AFTER_MAX,
    REMINDER_FIRST_AFTER_MIN,
    REMINDER_MAX_COUNT_MAX,
    REMINDER_MULTIPLIER_MAX,
    EscalationStep,
    Fire,
    Reminder,
    Step,
    StepKind,
    Timing,
    Wait,
    after_fired,
    decide_follow_up,
    escalation_offsets,
    follow_ups,
    pending_follow_ups,
    reminder_violations,
    snooze_reminder,
)
from uns_server.domain.schedule.nagging import NagState, nag_states, not_due, reminder_due
from uns_server.domain.schedule.planning import (
    SCHEDULE_AHEAD_MAX,
    first_attempt_at,
    plan,
    schedule_violations,
)
from uns_server.domain.schedule.quiet_hours import (
    QUIET_EXEMPT,
    QuietHours,
    held_until,
    is_quiet,
    next_allowed,
)
from uns_server.domain.schedule.step_retry import (
    STEP_ATTEMPTS_MAX,
    STEP_RETRY_AFTER_CAP_SECONDS,
    RetryStep,
    StepAnswer,
    StepDecided,
    StepOutcome,
    StepProgress,
    decide_step_attempt,
)

__all__ = [
    "ESCALATION_LOOPS_MAX",
    "ESCALATION_STEPS_MAX",
    "QUIET_EXEMPT",
    "REMINDER_FIRST_AFTER_MAX",
    "REMINDER_FIRST_AFTER_MIN",
    "REMINDER_MAX_COUNT_MAX",
    "REMINDER_MULTIPLIER_MAX",
    "SCHEDULE_AHEAD_MAX",
    "STEP_ATTEMPTS_MAX",
    "STEP_RETRY_AFTER_CAP_SECONDS",
    "EscalationStep",
    "Fire",
    "NagState",
    "QuietHours",
    "Reminder",
    "RetryStep",
    "Step",
    "StepAnswer",
    "StepDecided",
    "StepKind",
    "StepOutcome",
    "StepProgress",
    "Timing",
    "Wait",
    "after_fired",
    "decide_follow_up",
    "decide_step_attempt",
    "escalation_offsets",
    "first_attempt_at",
    "follow_ups",
    "held_until",
    "is_quiet",
    "nag_states",
    "next_allowed",
    "not_due",
    "pending_follow_ups",
    "plan",
    "reminder_due",
    "reminder_violations",
    "schedule_violations",
    "snooze_reminder",
]
