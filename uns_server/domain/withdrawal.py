"""Withdrawal: the obligation no longer stands (SPEC §5, issue 25). Pure.

::

    PENDING (due, scheduled, retrying, leased)   --withdraw--> WITHDRAWN
    FAILED + dead_letter                         --withdraw--> WITHDRAWN (out of the queue)
    DELIVERED + ack PENDING or SNOOZED (before deadline) --withdraw--> ack WITHDRAWN
    anything else (settled)                      --withdraw--> NOT_WITHDRAWABLE
    already withdrawn by the same caller         --withdraw--> the same answer again

**Fencing.** Withdrawing a row clears its dispatch lease and its follow-up lease in
the same transaction: no claim picks the row up after the commit (claims take only
PENDING rows and PENDING acks), and an attempt or reminder already in flight finds
its lease gone when it settles. Its provider observation is still recorded
(CHANNEL_ATTEMPT_RESULT, then LEASE_LOST), and its settlement changes nothing, so a
late success never resurrects a withdrawn notification.

**Dedup.** A leader carries one obligation for itself and for the pending followers
coalesced into it (same principal, source, dedup key and effective policy; they
were never sent on their own). Withdrawing the leader withdraws that shared
obligation: its pending followers become WITHDRAWN with it (event payload
``with_owner_id``), and the dedup window stops coalescing (a WITHDRAWN owner takes no
new sends, the next one leads a new generation). Withdrawing a follower withdraws
only the follower: the leader still carries its own obligation and that of the other
followers. A DEDUPLICATED follower is settled (its leader delivered for it): withdraw
the leader's pending ack instead (``dedup_owner_id`` in the refusal says which).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from uns_server.domain.enums import ACK_OWED, AckStatus, Status
from uns_server.domain.errors import NotWithdrawable


class Scope(StrEnum):
    """What a withdrawal settles."""

    NOTIFICATION = "NOTIFICATION"  # before delivery: the row becomes WITHDRAWN
    ACK = "ACK"  # after delivery: the pending ack becomes WITHDRAWN


@dataclass(frozen=True)
class WithdrawalRow:
    """The row to withdraw, as loaded (locked) by the caller."""

    id: str
    status: str
    ack_status: str | None
    dead_letter: bool
    deadline: datetime | None
    dedup_owner_id: str | None
    withdrawn_by: str | None


@dataclass(frozen=True)
class Withdraw:
    """Withdraw ``scope`` of the target, and these pending followers with it."""

    scope: Scope
    followers: tuple[str, ...] = ()


@dataclass(frozen=True)
class Repeat:
    """The same caller withdrew it already: answer the row as it is."""


def decide_withdrawal(
    target: WithdrawalRow, *, caller: str, pending_followers: tuple[str, ...], now: datetime
) -> Withdraw | Repeat:
    """The withdrawal of ``target`` by ``caller`` at ``now``, or ``NotWithdrawable``.

    ``pending_followers``: the PENDING rows whose ``dedup_owner_id`` is the target.
    """
    info = {
        "notification_id": target.id,
        "state": target.status,
        "ack_state": target.ack_status or "NONE",
    }
    if target.status == Status.WITHDRAWN or target.ack_status == AckStatus.WITHDRAWN:
        if target.withdrawn_by == caller:
            return Repeat()
        raise NotWithdrawable("already withdrawn by another actor", metadata=info)
    if target.status == Status.PENDING:
        # A follower has no followers; a leader's pending ones share its obligation.
        return Withdraw(Scope.NOTIFICATION, tuple(pending_followers))
    if target.status == Status.FAILED and target.dead_letter:
        return Withdraw(Scope.NOTIFICATION)
    if target.status == Status.DELIVERED and target.ack_status in ACK_OWED:
        if target.deadline is not None and target.deadline <= now:
            raise NotWithdrawable("the ack deadline has passed (TIMED_OUT)", metadata=info)
        return Withdraw(Scope.ACK)
    if target.status == Status.DEDUPLICATED and target.dedup_owner_id:
        raise NotWithdrawable(
            "deduplicated: its dedup leader delivered for it; withdraw the leader",
            metadata={**info, "dedup_owner_id": target.dedup_owner_id},
        )
    raise NotWithdrawable(
        f"already settled (state {target.status}, ack_state {info['ack_state']})", metadata=info
    )


@dataclass(frozen=True, slots=True)
class WithdrawRows:
    """The rows stop standing: both scopes clear the dispatch and follow-up leases
    (fencing anything in flight), stop follow-ups (no claim takes a withdrawn
    notification or ack, except to close a step caught between retries) and record who
    withdrew and why.

    NOTIFICATION: each row becomes WITHDRAWN (a dead letter leaves the queue); expected
    ``expected_status`` (PENDING, or FAILED for a dead letter). ACK: the one row's
    pending ack becomes WITHDRAWN with ``actor`` as its answerer, and its follow-up
    falls due at once so that a reminder or step caught between retries is closed;
    expected DELIVERED with the ack still owed (PENDING or SNOOZED)."""

    notification_ids: tuple[str, ...]
    scope: Scope
    expected_status: Status
    actor: str
    reason: str
    at: datetime

    @property
    def ack_status(self) -> AckStatus | None:
        return AckStatus.WITHDRAWN if self.scope == Scope.ACK else None


def rows_withdrawn(
    target: WithdrawalRow, decision: Withdraw, *, actor: str, reason: str, now: datetime
) -> WithdrawRows:
    """The move that withdraws the target itself, per ``decision`` (applied by
    ``store.moves.SqlMoves.withdraw``, like the moves of ``domain.moves``)."""
    expected = Status.DELIVERED if decision.scope == Scope.ACK else Status(target.status)
    return WithdrawRows((target.id,), decision.scope, expected, actor, reason, now)


def followers_withdrawn(
    decision: Withdraw, *, actor: str, reason: str, now: datetime
) -> WithdrawRows:
    """The move that withdraws the pending followers sharing the target's obligation."""
    return WithdrawRows(decision.followers, Scope.NOTIFICATION, Status.PENDING, actor, reason, now)
