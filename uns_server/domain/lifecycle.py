"""Delivery lifecycle rules that workers ask before they write (seed 000 §1.1, seed 004).

Pure: values in, a decision out; the caller loads the rows and stores the decision.

The notification and ack state machine. This docstring is its one source:
docs/ARCHITECTURE.md renders the same block (a test keeps the two equal), and the
Hypothesis model in tests/domain/test_state_machine.py walks only these edges.

```mermaid
stateDiagram-v2
    [*] --> PENDING: SendNotification (leader)
    [*] --> FOLLOWING: SendNotification (dedup key, its owner PENDING)
    [*] --> DEDUPLICATED: SendNotification (dedup key, its owner DELIVERED inside the window)
    PENDING --> PENDING: claim (lease, token, ATTEMPT_STARTED)<br/>retry<br/>expired lease recovered
    PENDING --> DELIVERED: every channel accepted
    PENDING --> FAILED: attempts spent, an interrupted one counts<br/>permanent rejection
    PENDING --> WITHDRAWN: WithdrawNotification before delivery
    FOLLOWING --> PENDING: promoted when its leader exhausts
    FOLLOWING --> FOLLOWING: relinked to the promoted follower
    FOLLOWING --> DEDUPLICATED: leader delivered (obligation satisfied)
    FOLLOWING --> WITHDRAWN: withdrawn, itself or with its leader
    FAILED --> PENDING: Replay (new cycle; operator; dead letters only)
    FAILED --> FAILED: ResolveFailure (dead_letter cleared)
    FAILED --> WITHDRAWN: WithdrawNotification (dead letters only)
    DELIVERED --> [*]
    DEDUPLICATED --> [*]
    WITHDRAWN --> [*]

    state "ack (require_ack, from DELIVERED)" as ack {
        [*] --> ACK_PENDING: delivered (deadline = delivered_at + ack_timeout)
        ACK_PENDING --> ACKED: Acknowledge / link / Slack / PagerDuty
        ACK_PENDING --> DISMISSED: Acknowledge(dismiss)
        ACK_PENDING --> TIMED_OUT: its ack_deadline job falls due (timers worker)
        ACK_PENDING --> ACK_WITHDRAWN: WithdrawNotification
        ACK_PENDING --> ACK_PENDING: reminder sent / escalation step fired
    }
```

**A claim** either starts the next attempt of the cycle or, when the cycle's attempts
are spent, settles the row as exhausted without calling any provider. Attempts are
counted when they are claimed (committed before provider I/O), so an attempt whose
worker died mid-flight was consumed: seed 004, "four consumed attempts become
explicit terminal failure, including interrupted delivery". A recovered row (its
previous lease expired unsettled) whose ``cycle_attempts`` already reached
``max_attempts`` is therefore FAILED (dead-lettered when GUARANTEED), its interrupted
attempt recorded as such, and never attempted again.

**A settlement** (the lease still held) decides from the channels' answers: every
channel of the policy accepted (in this attempt or an earlier one of the cycle) ->
DELIVERED (ack PENDING with its deadline when ``require_ack``); a permanent failure, or
a transient one on the cycle's last attempt -> FAILED (dead-lettered when GUARANTEED);
otherwise PENDING again, due after the backoff (``domain.retry``, a provider's
Retry-After as a floor, capped) and held by quiet hours like a first attempt. A
person's message held by their own quiet hours (``Settling.held``) is not sent: with
everything else accepted the row stays PENDING, due when the earliest hold ends, and
the claim's attempt is given back (``Settlement.gives_back_attempt``): a hold spends
no attempt, so it can never exhaust the cycle.

**A deferral** spends no attempt (an attempt counts provider failures, not a provider
asking us to wait): when every channel that did not accept answered *throttled* (HTTP
429) or *busy* (not called: this process's bulkhead for it was full), the row stays
PENDING, due after the longest wait asked (``retry.deferral_seconds``, capped, held by
quiet hours), its attempt given back. Throttle deferrals are counted per cycle
(``outcome.throttle_deferrals``) up to ``Settling.max_throttle_deferrals``; past it a
throttle is a transient failure that spends an attempt, and the cycle ends as its
policy says. Beside a real failure a wait spends the attempt (its wait a floor).

**An exhausted leader** (FAILED, for whatever reason) hands its obligation on, so
that a replay cannot deliver the same alert twice (``REPLAY_BLOCKED``):

- to its first pending follower, which is promoted to leader (the others are relinked
  to it and the dedup window passes to it);
- with no pending follower, to a newer active owner of the same dedup key (the
  window's current owner, of a later generation, that still coalesces new sends:
  PENDING, or DELIVERED inside its window); nothing else moves;
- otherwise to nobody.

**A dead letter** (FAILED, ``dead_letter``) leaves the queue only by an operator:
Replay opens cycle + 1 (refused with ``REPLAY_BLOCKED`` while a dedup successor
carries the obligation), ResolveFailure clears the flag and the row stays FAILED.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from uns_server.domain import schedule
from uns_server.domain.enums import AckStatus, DeliveryMode, Status
from uns_server.domain.errors import NotDeadLettered, ReplayBlocked
from uns_server.domain.retry import deferral_seconds, next_attempt_at

# ``error_message`` of the outcome of an attempt that never reported back.
INTERRUPTED_ERROR = (
    "attempt {attempt} was interrupted: its lease expired before a provider result was "
    "recorded (the provider may have received it); no attempts left in cycle {cycle}"
)


def attempts_exhausted(cycle_attempts: int, max_attempts: int) -> bool:
    """No attempt of the cycle is left once ``cycle_attempts`` (consumed, interrupted
    ones included) reaches ``max_attempts``."""
    return cycle_attempts >= max_attempts


def failed_state(delivery_mode: str) -> tuple[Status, bool]:
    """(status, dead_letter) of a leader that failed for good: GUARANTEED work waits for
    an operator in the dead-letter queue, BEST_EFFORT work just ends."""
    return Status.FAILED, delivery_mode == DeliveryMode.GUARANTEED.value


@dataclass(frozen=True)
class StartAttempt:
    """Call the providers: this claim is attempt ``attempt`` overall, ``cycle_attempt``
    of its cycle."""

    attempt: int
    cycle_attempt: int
    recovered: bool  # the previous attempt never settled: its effect is unknown


@dataclass(frozen=True)
class SettleExhausted:
    """Call no provider: settle the row as failed. ``attempt`` / ``cycle_attempt`` are
    the last consumed attempt's (the counters do not move)."""

    attempt: int
    cycle_attempt: int
    interrupted: bool  # that attempt never reported back
    status: Status
    dead_letter: bool


def decide_claim(
    *,
    attempts: int,
    cycle_attempts: int,
    max_attempts: int,
    recovered: bool,
    delivery_mode: str,
) -> StartAttempt | SettleExhausted:
    """What to do with a row just claimed; the counters are the row's before the claim."""
    if attempts_exhausted(cycle_attempts, max_attempts):
        status, dead_letter = failed_state(delivery_mode)
        return SettleExhausted(attempts, cycle_attempts, recovered, status, dead_letter)
    return StartAttempt(attempts + 1, cycle_attempts + 1, recovered)


def interrupted_outcome(
    *, attempt: int, cycle: int, succeeded: Sequence[str], unconfirmed: Sequence[str]
) -> dict[str, object]:
    """The ``outcome`` of a row settled after an interrupted last attempt: the channels
    it had started count as failed (no provider ever confirmed them)."""
    return {
        "channels_attempted": list(unconfirmed),
        "channels_succeeded": list(succeeded),
        "channels_failed": list(unconfirmed),
        "error_message": INTERRUPTED_ERROR.format(attempt=attempt, cycle=cycle),
    }


# Retry-After beyond this is treated as this (a bogus header must not park work for years).
RETRY_AFTER_CAP_SECONDS = 3600.0
# A busy channel (its bulkhead full, not called) is asked again this much later.
BUSY_RETRY_SECONDS = 1.0
# Throttle deferrals per cycle (``dispatch_max_throttle_deferrals``).
THROTTLE_DEFERRALS_MAX_DEFAULT = 10


@dataclass(frozen=True)
class ChannelAnswer:
    """What one channel said in this attempt."""

    channel: str
    success: bool
    retryable: bool = False
    error: str | None = None
    retry_after_seconds: float | None = None
    throttled: bool = False  # the provider asked us to wait (HTTP 429)
    busy: bool = False  # not called: this process's bulkhead for the channel was full


@dataclass(frozen=True)
class Settling:
    """The leased row being settled, as far as the settlement reads it."""

    channels: tuple[str, ...]  # the effective policy's channels
    succeeded_before: tuple[str, ...]  # accepted by earlier attempts of this cycle
    cycle_attempt: int  # this attempt's number in its cycle (already counted)
    max_attempts: int
    delivery_mode: str
    require_ack: bool
    ack_timeout_minutes: int
    quiet_hours: schedule.QuietHours | None = None
    follows_up: bool = False  # the policy has reminders or escalation steps
    intent: str | None = None
    # People's messages their own quiet hours hold (route key -> when the hold ends):
    # not sent by this attempt, so not among ``channels``.
    held: Mapping[str, datetime] = field(default_factory=dict)
    # Throttle deferrals made in this cycle before (``outcome.throttle_deferrals``).
    throttle_deferrals: int = 0
    max_throttle_deferrals: int = THROTTLE_DEFERRALS_MAX_DEFAULT


@dataclass(frozen=True)
class Settlement:
    """A settled attempt: the row's new state and the DELIVERY_RESULT's pieces."""

    status: Status
    dead_letter: bool
    outcome: dict[str, object]
    delivered_at: datetime | None = None
    next_attempt: datetime | None = None  # PENDING: when the retry is due
    ack_status: AckStatus | None = None  # DELIVERED with require_ack: PENDING
    deadline: datetime | None = None
    follow_up_at: datetime | None = None  # an opened ack's first ``follow_up`` job
    # PENDING for people's held messages and deferrals: the claim's attempt is not
    # counted.
    gives_back_attempt: bool = False

    def result_payload(self, base: dict[str, object]) -> dict[str, object]:
        """The DELIVERY_RESULT payload: ``base`` (attempt, cycle, cycle_attempt) and
        the decision."""
        return {
            **base,
            "status": self.status.value,
            "dead_letter": self.dead_letter,
            "outcome": self.outcome,
        }


def decide_settlement(
    row: Settling,
    answers: Sequence[ChannelAnswer],
    now: datetime,
    *,
    rand: Callable[[], float],
) -> Settlement:
    """The settlement of an attempt whose lease is still held (see the module doc).
    ``rand`` is the backoff's jitter source (``random.random``)."""
    succeeded = list(row.succeeded_before)
    succeeded += [a.channel for a in answers if a.success and a.channel not in succeeded]
    deferring = row.throttle_deferrals < row.max_throttle_deferrals
    waiting = [a for a in answers if not a.success and (a.busy or (a.throttled and deferring))]
    failed = [a for a in answers if not a.success and a not in waiting]
    outcome: dict[str, object] = {
        "channels_attempted": [a.channel for a in answers if not a.busy],
        "channels_succeeded": succeeded,
        "channels_failed": [a.channel for a in failed],
        "error_message": "; ".join(f"{a.channel}: {a.error}" for a in answers if not a.success)
        or None,
    }
    if row.throttle_deferrals:
        outcome["throttle_deferrals"] = row.throttle_deferrals
    held_until = min(row.held.values(), default=None)
    if all(ch in succeeded for ch in row.channels):
        if held_until is not None:  # the rest is sent when the first hold ends
            return Settlement(
                Status.PENDING, False, outcome, next_attempt=held_until, gives_back_attempt=True
            )
        if row.require_ack:
            deadline = now + timedelta(minutes=row.ack_timeout_minutes)
            first = now if row.follows_up else None  # its first follow-up job's due time
            pending = AckStatus.PENDING
            return Settlement(Status.DELIVERED, False, outcome, now, None, pending, deadline, first)
        return Settlement(Status.DELIVERED, False, outcome, now)
    exhausted = attempts_exhausted(row.cycle_attempt, row.max_attempts)
    if any(not a.retryable for a in failed) or (exhausted and (failed or not waiting)):
        status, dead_letter = failed_state(row.delivery_mode)
        return Settlement(status, dead_letter, outcome)
    if not failed:  # only waits: deferred, the attempt given back
        throttled = any(a.throttled for a in waiting)
        if throttled:
            outcome["throttle_deferrals"] = row.throttle_deferrals + 1
        outcome["channels_deferred"] = [a.channel for a in waiting]
        seconds = max(
            deferral_seconds(
                a.retry_after_seconds,
                row.throttle_deferrals + 1,
                busy_seconds=BUSY_RETRY_SECONDS if a.busy else None,
                rand=rand,
            )
            for a in waiting
        )
        due = now + timedelta(seconds=min(seconds, RETRY_AFTER_CAP_SECONDS))
        return Settlement(
            Status.PENDING,
            False,
            outcome,
            next_attempt=_held(due, row, held_until),
            gives_back_attempt=True,
        )
    retry_after = max((a.retry_after_seconds or 0.0 for a in (*failed, *waiting)), default=0.0)
    due = next_attempt_at(
        now,
        row.cycle_attempt,
        rand=rand,
        retry_after_seconds=min(retry_after, RETRY_AFTER_CAP_SECONDS),
    )
    return Settlement(Status.PENDING, False, outcome, next_attempt=_held(due, row, held_until))


def _held(due: datetime, row: Settling, held_until: datetime | None) -> datetime:
    """Quiet hours hold a retry like the first attempt (``domain.schedule``); a person's
    held message is sent by the first attempt after its hold ends."""
    due = schedule.next_allowed(due, row.quiet_hours, row.intent)
    return due if held_until is None else min(due, held_until)


@dataclass(frozen=True)
class DedupOwner:
    """The current owner of a dedup window, as read under the window's lock."""

    id: str
    status: Status
    generation: int
    window_until: datetime


@dataclass(frozen=True)
class HandOff:
    """Where an exhausted leader's obligation goes."""

    successor_id: str
    generation: int
    promoted: bool  # a follower becomes leader (else a newer owner already carries it)
    relinked: tuple[str, ...] = ()  # followers that now follow the promoted one


@dataclass(frozen=True)
class Follower:
    id: str
    generation: int


def decide_hand_off(
    *,
    leader_id: str,
    leader_generation: int | None,
    pending_followers: Sequence[Follower],
    window_owner: DedupOwner | None,
    now: datetime,
) -> HandOff | None:
    """The successor of a leader that has just failed for good, or None.

    ``pending_followers`` in promotion order (oldest first); ``window_owner`` is the
    owner of the leader's dedup window (None without a dedup key or window).
    """
    if pending_followers:
        first, rest = pending_followers[0], pending_followers[1:]
        return HandOff(first.id, first.generation, True, tuple(f.id for f in rest))
    owner = window_owner
    if owner is None or owner.id == leader_id:
        return None
    if leader_generation is not None and owner.generation <= leader_generation:
        return None
    if not coalesces(owner.status, owner.window_until, now):
        return None
    return HandOff(owner.id, owner.generation, False)


def coalesces(owner_status: str, window_until: datetime, now: datetime) -> bool:
    """Does a dedup window's owner take a new send of its key right now? A PENDING
    owner does whatever the window's ``until`` (pending ownership survives window
    expiry); a DELIVERED one only inside its window."""
    if owner_status == Status.PENDING:
        return True
    return owner_status == Status.DELIVERED and now < window_until


# -- operator doors out of the dead-letter queue (Replay, ResolveFailure) -------------

# A successor in one of these carries the obligation (pending, or already satisfied).
CARRYING = frozenset({Status.PENDING, Status.DELIVERED, Status.DEDUPLICATED})


def check_dead_lettered(notification_id: str, status: str, dead_letter: bool) -> None:
    """Replay and ResolveFailure act only on a FAILED row with ``dead_letter`` set."""
    if status != Status.FAILED or not dead_letter:
        flag = str(dead_letter).lower()
        raise NotDeadLettered(
            f"state {status}, dead_letter {flag}",
            metadata={"notification_id": notification_id, "state": status, "dead_letter": flag},
        )


def check_replay_unblocked(
    notification_id: str, successor_id: str | None, successor_status: str | None
) -> None:
    """A replay would deliver the alert twice while its dedup successor carries it
    (``successor_status`` None: no successor, or it is gone)."""
    if successor_id and successor_status in CARRYING:
        raise ReplayBlocked(
            metadata={
                "notification_id": notification_id,
                "dedup_successor_id": successor_id,
                "successor_state": successor_status,
            }
        )
