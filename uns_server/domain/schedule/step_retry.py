"""Retrying one reminder or escalation step whose provider call failed transiently.

The step is retried on the failing channels alone (:func:`decide_step_attempt`), with
the delivery backoff, before the next step fires; its one event is written once it is
decided.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from uns_server.domain.retry import next_attempt_at
from uns_server.domain.schedule.follow_up_steps import StepKind
from uns_server.domain.schedule.quiet_hours import QuietHours, next_allowed

# Provider calls per reminder or escalation step at most: the policy's max_attempts,
# capped here, because a step retried for long would crowd the next one (steps fire in
# order) and a reminder that comes late is worth little.
STEP_ATTEMPTS_MAX = 5
# A provider's Retry-After beyond this is treated as this (the deadline bounds it anyway).
STEP_RETRY_AFTER_CAP_SECONDS = 3600.0


class StepOutcome(StrEnum):
    """How a step was decided (the ``decision`` of its REMINDER_SENT / ESCALATED event)."""

    SENT = "SENT"  # every channel accepted it
    GAVE_UP = "GAVE_UP"  # a channel refused for good, or retries ran out before it accepted
    STOPPED = "STOPPED"  # the ack settled or was withdrawn while the step waited to retry
    # Nothing to send: everyone the step asks is in their own quiet hours, or (a
    # reminder) not due on their own count (``nagging``); the next step asks again.
    SKIPPED = "SKIPPED"


@dataclass(frozen=True)
class StepAnswer:
    """What one channel said to the latest call of a step (``ChannelResult``, classified)."""

    success: bool
    retryable: bool
    retry_after_seconds: float | None = None

    @property
    def transient(self) -> bool:
        return not self.success and self.retryable


@dataclass(frozen=True, slots=True)
class StepProgress:
    """A step between its provider calls (the ``followup_step`` column, parsed by the
    store once per row read): how many calls it made and each channel's latest answer
    as recorded, while it retries the channels that failed transiently."""

    kind: StepKind
    number: int
    due_time: datetime
    """When the step fell due (before its retries)."""
    calls: int
    results: Mapping[str, Mapping[str, Any]]
    """Channel (or route key) -> its latest answer, as recorded."""
    recovered: bool
    """Some call of this step may have had an unrecorded effect."""

    def is_of(self, kind: StepKind, number: int) -> bool:
        return (self.kind, self.number) == (kind, number)

    def answers(self) -> dict[str, StepAnswer]:
        return {
            ch: StepAnswer(r["success"], r["retryable"], r.get("retry_after_seconds"))
            for ch, r in self.results.items()
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "number": self.number,
            "due_time": self.due_time.isoformat(),
            "calls": self.calls,
            "results": dict(self.results),
            "recovered": self.recovered,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> StepProgress | None:
        """Inverse of :meth:`to_json`; None (SQL NULL) is no step in progress."""
        if not data:
            return None
        return cls(
            StepKind(data["kind"]),
            int(data["number"]),
            datetime.fromisoformat(data["due_time"]),
            int(data["calls"]),
            dict(data["results"]),
            bool(data["recovered"]),
        )


@dataclass(frozen=True)
class StepDecided:
    """Record the step now (its one event) and move on to the next."""

    outcome: StepOutcome


@dataclass(frozen=True)
class RetryStep:
    """Call ``channels`` (those that failed transiently) again at ``at``; no event yet."""

    at: datetime
    channels: tuple[str, ...]


def decide_step_attempt(
    *,
    channels: Sequence[str],
    answers: Mapping[str, StepAnswer],
    attempts: int,
    max_attempts: int,
    ack_pending: bool,
    now: datetime,
    deadline: datetime,
    quiet: QuietHours | None,
    intent: str | None,
    rand: Callable[[], float],
) -> StepDecided | RetryStep:
    """After ``attempts`` calls of one step, with each channel's latest answer: decided,
    or retried on the channels that failed transiently, with the delivery backoff
    (``domain.retry``), held by quiet hours.

    A step with no channel to call (everyone it asks waits) is SKIPPED. A channel
    that accepted is never called again, and a permanent refusal is final for
    its channel. Once no channel is left to retry the step is SENT (all accepted) or
    GAVE_UP. Otherwise it is STOPPED when the ack is no longer pending, GAVE_UP after
    ``min(max_attempts, STEP_ATTEMPTS_MAX)`` calls or when the retry would not come
    before the ack deadline, and retried on the transient channels alone.
    """
    if not channels:
        return StepDecided(StepOutcome.SKIPPED)
    retry = tuple(ch for ch in channels if ch not in answers or answers[ch].transient)
    if not retry:
        if all(answers[ch].success for ch in channels):
            return StepDecided(StepOutcome.SENT)
        return StepDecided(StepOutcome.GAVE_UP)
    if not ack_pending:
        return StepDecided(StepOutcome.STOPPED)
    if attempts >= min(max_attempts, STEP_ATTEMPTS_MAX):
        return StepDecided(StepOutcome.GAVE_UP)
    hint = max(
        (answers[ch].retry_after_seconds or 0.0 for ch in retry if ch in answers), default=0.0
    )
    due = next_attempt_at(
        now,
        max(attempts, 1),
        rand=rand,
        retry_after_seconds=min(hint, STEP_RETRY_AFTER_CAP_SECONDS),
    )
    due = next_allowed(due, quiet, intent)
    if due >= deadline:
        return StepDecided(StepOutcome.GAVE_UP)
    return RetryStep(due, retry)
