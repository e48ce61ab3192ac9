"""The delivery outbox's ports: claim and fenced settlement (``Dispatch``), the typed
lifecycle moves (``Moves``), follow-ups and ack settlement. Each is
bound to one transaction; the ``...Reads`` half is what a read transaction offers."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from uns_server.domain import moves as m
from uns_server.domain.enums import AckStatus, Status
from uns_server.domain.records import Attempt, DedupWindow, Notification
from uns_server.domain.snooze import Snooze
from uns_server.domain.withdrawal import WithdrawRows


class DispatchReads(Protocol):
    async def next_due_at(self, channels: Collection[str]) -> datetime | None:
        """When the earliest unleased leader ``claim`` would take becomes due."""
        ...

    async def results_recorded_for(self, tokens: Collection[tuple[str, str]]) -> set[str]:
        """Of these (id, token), the tokens whose settlement has committed."""
        ...

    async def status_of(self, notification_id: str) -> Status | None:
        """The notification's current status (None: no such notification)."""
        ...


class Dispatch(DispatchReads, Protocol):
    """Claim, lease and fenced settlement of deliveries."""

    async def claim(
        self, *, now: datetime, limit: int, lease: timedelta, channels: Collection[str]
    ) -> Sequence[Attempt]:
        """Lease up to ``limit`` due leaders (each as before the claim, its new token)."""
        ...

    async def settle_many(self, moves: Sequence[m.LeasedMove], now: datetime) -> frozenset[str]:
        """Apply each move where its token still holds the row; the ids that did (a lost
        fence is an absent id, as ``Jobs.settle_many``)."""
        ...

    async def settle_leased(
        self, moves: Sequence[m.LeasedMove], now: datetime
    ) -> set[tuple[str, str]]:
        """Lock and apply each move where its token still holds an unexpired lease, in
        one statement per row; the (id, token) pairs that did."""
        ...

    async def settle_leased_with_events(self, moves: Sequence[m.LeasedMove], now: datetime) -> None:
        """``settle_leased`` expecting every lease to hold, done by the transaction's
        events append (only where ``Store.settles_with_events``), which raises
        ``FenceMoved`` if one did not."""
        ...

    async def carry(self, now: datetime, *, limit: int) -> int:
        """Up to ``limit`` PENDING leaders without a live delivery job (queued by a
        replica of the previous release) get one, due at their ``next_attempt``, and up
        to ``limit`` live delivery jobs whose row is no longer a PENDING leader (one
        such replica settled it) are cancelled; how many rows changed."""
        ...

    async def pending_followers(self, owner_id: str) -> Sequence[Notification]:
        """The owner's PENDING followers in promotion order (oldest first), locked."""
        ...

    async def window_owner(self, dedup_key: str) -> tuple[DedupWindow, Notification] | None:
        """The key's dedup window, locked, and its current owner (hand-off)."""
        ...


class Moves(Protocol):
    """The typed lifecycle moves (``domain.moves``), one named, fenced query each."""

    async def replay(self, move: m.DeadLetterReplay) -> m.Applied: ...
    async def resolve_failure(self, move: m.ResolveFailure) -> m.Applied: ...
    async def withdraw(self, move: WithdrawRows) -> m.Applied: ...
    async def satisfy_followers(self, move: m.SatisfyFollowers) -> m.Applied: ...
    async def extend_window(self, move: m.ExtendWindow) -> m.Applied: ...
    async def record_successor(self, move: m.RecordSuccessor) -> m.Applied: ...
    async def promote(self, move: m.Promote) -> m.Applied: ...
    async def relink(self, move: m.Relink) -> m.Applied: ...
    async def move_window(self, move: m.MoveWindow) -> m.Applied: ...


class FollowUpReads(Protocol):
    async def sending(self, notification_id: str, now: datetime) -> bool:
        """Is a follow-up step of the notification being sent, or a person's staged
        rule: its ``follow_up`` or ``person_rule`` job running under a lease that has
        not expired at ``now``?"""
        ...


class FollowUps(FollowUpReads, Protocol):
    """What reminders and escalation steps write on the notification; their lease is
    their ``follow_up`` work row's (``domain.follow_up_jobs``, ``Jobs``), settled in
    the same transaction before any of these."""

    async def look_again(self, notification_id: str, at: datetime | None) -> None:
        """Nothing is due yet: the next follow-up time shown is ``at`` (None: none)."""
        ...

    async def record_progress(self, move: m.RetryFollowUpStep) -> None:
        """Store the step's progress, its retry time and references."""
        ...

    async def record_step(self, move: m.SettleFollowUpStep) -> None:
        """Count the decided step, store the next follow-up time, clear its progress."""
        ...

    async def record_person_rule(self, move: m.RecordPersonRule) -> None:
        """Store a staged rule's firing: the outcome (its entry marked) and the
        references of the messages it sent."""
        ...

    async def carry(self, now: datetime, *, limit: int) -> int:
        """Insert a ``follow_up`` job, due at its follow-up time, for up to ``limit``
        notifications whose follow-up is due (``followup_at`` passed, the ack PENDING
        or a step waiting to be closed) with no live job and no unexpired lease of the
        previous release's; how many. (Those the previous release scheduled.)"""
        ...


class Acks(Protocol):
    """Acknowledgement settlement, guarded on the current ``ack_status``."""

    async def settle_pending(
        self,
        notification_id: str,
        *,
        status: AckStatus,
        actor: str,
        metadata: Mapping[str, Any] | None,
        now: datetime,
        sent_while_held: bool = False,
    ) -> bool:
        """PENDING (or SNOOZED) -> ``status``; False (and nothing changed) when no
        answer was owed.
        A row whose delivery is in flight (leased, no ack yet) settles too, and so does
        one whose messages went out while a person's were held (``sent_while_held``,
        read by the caller under the row lock)."""
        ...

    async def locked(self, notification_ids: Collection[str]) -> Mapping[str, Notification]:
        """Those of these notifications that exist, by id, each locked until commit (in
        id order, waiting for a lock another writer holds): the rows of due
        ``ack_deadline`` jobs, re-read before they are timed out."""
        ...

    async def due_deadlines(self, now: datetime, limit: int) -> Sequence[Notification]:
        """PENDING acks whose deadline has passed, earliest first, locked (SKIP LOCKED):
        the timers worker's carry sweep for acks opened by the previous release, which
        inserts no ``ack_deadline`` job; removed with it by a later contract step."""
        ...

    async def snooze(self, notification_id: str, move: Snooze, now: datetime) -> bool:
        """PENDING or SNOOZED -> SNOOZED until ``move.until``, the deadline and the
        pauses so far as ``move`` says; False (nothing changed) when no answer was owed."""
        ...

    async def resume(self, notification_id: str, now: datetime) -> bool:
        """SNOOZED -> PENDING (the snooze's end cleared, ``snoozes_ended`` counted up:
        the number of its reminder), its unclaimed ``follow_up`` jobs cancelled (the
        caller inserts the one that goes on); False when not SNOOZED."""
        ...
