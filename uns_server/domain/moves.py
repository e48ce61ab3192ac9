"""Typed moves: what a lifecycle transition changes, as the domain decided it. Pure.

A move names the rows it changes, the state they must still be in, and the new
values in domain terms (no column names). The store applies each with one named query
(``store.moves``; the follow-ups' in ``store.followups``, a settled lease's in
``store.dispatch``) whose WHERE holds that expected state, so a row that moved meanwhile is not
overwritten: the store answers :class:`Applied` with what it changed, and a move that
changed fewer rows than it named is *lost* (``Applied.lost``), a typed outcome the
caller handles, never a silent blind write (River's ``JobSetStateIfRunning``).

The moves here: the operator doors (Replay, ResolveFailure), withdrawal (its move,
``WithdrawRows``, lives beside its decision in ``domain.withdrawal``), what a settled
dedup leader does to its followers and its window (seed 000 §1.1), the follow-ups'
steps (fenced by their work row, ``domain.follow_up_jobs``), and an attempt's
settlement::

    FAILED+dead_letter --Replay--------> PENDING (cycle + 1, due now, outcome cleared)
    FAILED+dead_letter --ResolveFailure-> FAILED (dead_letter cleared)
    PENDING | FAILED+dead_letter --Withdraw(NOTIFICATION)--> WITHDRAWN
    DELIVERED+ack PENDING --Withdraw(ACK)--> ack WITHDRAWN
    FOLLOWING (of L) --SatisfyFollowers(L delivered)--> DEDUPLICATED
    FOLLOWING (of L) --Promote(L exhausted)--> PENDING leader, due now
    FOLLOWING (of L) --Relink(to the promoted P)--> FOLLOWING (of P)
    window (owner L) --ExtendWindow / MoveWindow--> window (until / owner moved)
    step called --RetryFollowUpStep--> its progress kept, its job due at the retry
    step called (or left when the ack ended) --SettleFollowUpStep--> counted, next due
    PENDING, leased --SettleAttempt--> DELIVERED | PENDING (retry due) | FAILED (dead letter)
    PENDING, leased, no attempt left --ExhaustAttempt--> FAILED (a dead letter if GUARANTEED)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from uns_server.domain.enums import Status
from uns_server.domain.lifecycle import Settlement
from uns_server.domain.outcomes import DeliveryOutcome
from uns_server.domain.records import Notification
from uns_server.domain.schedule import StepKind, StepProgress


@dataclass(frozen=True, slots=True)
class Applied:
    """What a move changed: ``changed`` of the ``named`` rows (``ids``: which ones, for
    the moves of several rows)."""

    named: int
    changed: int
    ids: tuple[str, ...] = ()

    @property
    def lost(self) -> bool:
        """Some named row was no longer in the expected state (and was left as it was)."""
        return self.changed < self.named

    def expect(self, what: str) -> None:
        """Raise ``MoveLost`` if the move was lost, for a caller that cannot go on
        without it: nothing of its transaction may commit. ``what`` names the move in
        the error."""
        if self.lost:
            raise MoveLost(f"{what}: {self.changed} of {self.named} rows moved as expected")


class MoveLost(RuntimeError):
    """A move that no concurrent change can explain was lost (``Applied.expect``)."""


# -- the operator doors out of the dead-letter queue ----------------------------------


@dataclass(frozen=True, slots=True)
class DeadLetterReplay:
    """A dead letter starts cycle ``from_cycle + 1`` afresh: PENDING, due ``at``,
    its cycle's attempts and outcome cleared, no lease. Expected: FAILED, dead-lettered,
    still in ``from_cycle``."""

    notification_id: str
    from_cycle: int
    at: datetime

    @property
    def cycle(self) -> int:
        return self.from_cycle + 1


EMPTY_OUTCOME: dict[str, object] = {
    "channels_attempted": [],
    "channels_succeeded": [],
    "channels_failed": [],
    "error_message": None,
}


def replayed(row: Notification, move: DeadLetterReplay) -> Notification:
    """``row`` as ``move`` leaves it (Replay's ``validate_only`` preview)."""
    return replace(
        row,
        status=Status.PENDING,
        dead_letter=False,
        cycle=move.cycle,
        cycle_attempts=0,
        next_attempt=move.at,
        lease_token=None,
        lease_until=None,
        outcome=DeliveryOutcome(),
        updated_at=move.at,
    )


@dataclass(frozen=True, slots=True)
class ResolveFailure:
    """A dead letter leaves the queue and stays FAILED. Expected: FAILED, dead-lettered."""

    notification_id: str
    at: datetime


def resolved(row: Notification, move: ResolveFailure) -> Notification:
    """``row`` as ``move`` leaves it (ResolveFailure's ``validate_only`` preview)."""
    return replace(row, dead_letter=False, updated_at=move.at)


# -- withdrawal --------------------------------------------------------------------------

# ``WithdrawRows`` (withdrawal's move) lives beside its decision in ``domain.withdrawal``.


# -- a settled dedup leader, its followers and its window ------------------------------


@dataclass(frozen=True, slots=True)
class SatisfyFollowers:
    """The leader delivered: its pending followers are DEDUPLICATED. Expected: PENDING
    and still following ``leader_id`` (one withdrawn meanwhile stays WITHDRAWN: the
    move is partly lost, and ``Applied.ids`` says which were satisfied)."""

    leader_id: str
    follower_ids: tuple[str, ...]
    at: datetime


@dataclass(frozen=True, slots=True)
class ExtendWindow:
    """The delivered leader's dedup window coalesces until ``until``. Expected: the
    window owned by ``owner_id`` or by no one (a newer leader that took it meanwhile
    keeps it)."""

    key: str
    owner_id: str
    until: datetime


@dataclass(frozen=True, slots=True)
class RecordSuccessor:
    """The exhausted leader names who carries its obligation now (Replay checks it)."""

    leader_id: str
    successor_id: str


@dataclass(frozen=True, slots=True)
class Promote:
    """The first pending follower of the exhausted leader leads, due ``at``. Expected:
    PENDING and following ``from_owner_id``."""

    follower_id: str
    from_owner_id: str
    at: datetime


@dataclass(frozen=True, slots=True)
class Relink:
    """The other pending followers now follow the promoted one. Expected: PENDING and
    following ``from_owner_id`` (one withdrawn meanwhile is left alone)."""

    follower_ids: tuple[str, ...]
    from_owner_id: str
    to_owner_id: str
    at: datetime


@dataclass(frozen=True, slots=True)
class MoveWindow:
    """The exhausted leader's dedup window passes to the promoted follower. Expected:
    owned by ``from_owner_id``."""

    key: str
    from_owner_id: str
    to_owner_id: str


# -- follow-ups (reminders and escalation steps), fenced by their work row ------------


@dataclass(frozen=True, slots=True)
class FollowUpCounts:
    """How many reminders and escalation steps an obligation has counted as sent."""

    reminders_sent: int
    escalations_sent: int

    def after(self, kind: StepKind, number: int) -> FollowUpCounts:
        """Counted up to step ``number`` of ``kind``: a counter only moves forward (a
        step recovered after a lost lease, or closed late, never counts twice). A
        snooze's reminder is none of the policy's steps: it counts nothing."""
        if kind == StepKind.SNOOZE_REMINDER:
            return self
        if kind == StepKind.REMINDER:
            return replace(self, reminders_sent=max(self.reminders_sent, number))
        return replace(self, escalations_sent=max(self.escalations_sent, number))


@dataclass(frozen=True, slots=True)
class RetryFollowUpStep:
    """The step's call is retried at ``at``; ``step`` records its progress, and the
    channels that took it already are in ``provider_refs`` (closed when it ends).
    Applied in the transaction whose fenced settle of the step's ``follow_up`` job
    landed (``domain.follow_up_jobs``): that job's lease is the fence."""

    notification_id: str
    step: StepProgress
    at: datetime
    provider_refs: Mapping[str, Any] | None
    now: datetime


@dataclass(frozen=True, slots=True)
class SettleFollowUpStep:
    """The step is decided (SENT, GAVE_UP, STOPPED or SKIPPED: its one event): counted,
    the next follow-up due at ``next_at`` (None: nothing more to send; its job is
    inserted in the same commit), its progress cleared. Applied where the step's
    ``follow_up`` job settled (its lease is the fence) or, closing a step whose ack
    ended, under the row's lock."""

    notification_id: str
    counts: FollowUpCounts
    next_at: datetime | None
    provider_refs: Mapping[str, Any] | None
    now: datetime


@dataclass(frozen=True, slots=True)
class RecordPersonRule:
    """A person's staged rule fired (``domain.person_rule_jobs``): the delivered row's
    ``outcome`` with the rule's entry marked, and its ``provider_refs`` with the
    messages it sent (None: unchanged). Applied where the rule's ``person_rule`` job
    settled (its lease is the fence), the row locked; no delivery lease holds a
    DELIVERED row, so no settlement writes these columns meanwhile."""

    notification_id: str
    outcome: Mapping[str, Any]
    provider_refs: Mapping[str, Any] | None
    now: datetime


# -- an attempt's lease settled (the hot path: many per statement) --------------------


@dataclass(frozen=True, slots=True)
class SettleAttempt:
    """The attempt's decision (``lifecycle.decide_settlement``) applied, the attempt
    counted, the lease released, and the references of the messages it sent kept
    (closed when the obligation ends). Expected: ``token`` still holds the row's
    lease (its delivery job's), unexpired."""

    notification_id: str
    token: str
    settlement: Settlement
    # The counters the attempt leaves: the claim counts nothing on the row (its lease
    # is the job's), so the settle writes them. ``cycle_attempts`` is as before the
    # claim when the settlement gives the attempt back
    # (``Settlement.gives_back_attempt``: only people's messages held).
    attempts: int
    cycle_attempts: int
    provider_refs: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ExhaustAttempt:
    """A claimed row with no attempt left (its last one was interrupted) settles as an
    exhausted retry, without a provider call: the counters as the claim found them
    (``attempts``, ``cycle_attempts``, the interrupted attempt counted), the lease
    released. Expected: ``token`` still holds the row's lease."""

    notification_id: str
    token: str
    status: Status
    dead_letter: bool
    outcome: Mapping[str, Any]
    attempts: int
    cycle_attempts: int


LeasedMove = SettleAttempt | ExhaustAttempt
