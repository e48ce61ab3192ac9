"""The acknowledgement decision (seed 000 §1.2), for every path an answer can take:
gRPC Acknowledge, signed action links, Slack and PagerDuty callbacks, the console.
Pure: the caller loads (and locks) the row, asks, and settles.

    (none) --delivered with require_ack--> PENDING
    (none) --answer while the delivery is in flight--> ACKED | DISMISSED
    PENDING --answer before deadline--> ACKED | DISMISSED
    PENDING --deadline passed, timers worker--> TIMED_OUT
    PENDING --WithdrawNotification--> WITHDRAWN

Same actor + same outcome again returns the original settlement; an answer to a
withdrawn ack is ACK_NOT_PENDING (the withdrawing actor unnamed); anything else on a
settled ack is ACK_CONFLICT; after the deadline ACK_DEADLINE_PASSED, even before the
sweep has run (late human acks are refused, never raced against the worker).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from uns_server.domain.enums import ACK_OWED, AckStatus, Status
from uns_server.domain.errors import AckConflict, AckDeadlinePassed, AckNotPending
from uns_server.domain.records import Notification


@dataclass(frozen=True)
class AckTarget:
    """The notification being answered, as far as the decision reads it."""

    id: str
    status: str  # the delivery status
    require_ack: bool
    ack_status: str | None
    deadline: datetime | None
    actor: str | None  # who settled the ack, once settled
    # A delivery attempt is leased and unsettled: the message may have reached its
    # recipient, who may answer before the attempt's result is committed. Also while
    # a person's message waits for their quiet hours to end and the others went out
    # (the delivery is PENDING until then, its ack not yet opened).
    in_flight: bool = False


def decide_ack(
    target: AckTarget,
    outcome: AckStatus,
    actor: str,
    now: datetime,
    *,
    may_name: Callable[[str | None], bool] = lambda _actor: True,
) -> bool:
    """True for a same-actor, same-outcome repeat (answer the original settlement),
    False when the pending ack may be settled now; raises the refusal otherwise.
    ``may_name`` says whether a conflict may name the actor who settled it (tenancy,
    SPEC §3)."""
    status = target.ack_status
    info = {"notification_id": target.id, "ack_state": status or "NONE"}
    if status is None and target.require_ack and target.in_flight:
        return False  # answered from the message its delivery is sending: honoured
    if status is None:
        raise AckNotPending(
            "the notification has no pending acknowledgement "
            f"(state {target.status}, require_ack {target.require_ack})",
            metadata={**info, "state": target.status},
        )
    if status == AckStatus.WITHDRAWN:
        # The obligation no longer stands: nothing is pending, and who withdrew it is
        # not this caller's business (the producer or an operator, SPEC §5).
        raise AckNotPending(
            "the acknowledgement was withdrawn; nothing is pending",
            metadata={**info, "state": target.status},
        )
    if status == AckStatus.TIMED_OUT or (
        status in ACK_OWED and target.deadline is not None and target.deadline <= now
    ):
        assert target.deadline is not None
        raise AckDeadlinePassed(metadata={**info, "deadline": target.deadline.isoformat()})
    if status not in ACK_OWED:  # a snoozed answer is still owed: it may be given
        if target.actor == actor and status == outcome:
            return True
        raise _conflict(actor, may_name, status, target.actor, info)
    return False


def _conflict(
    caller: str,
    may_name: Callable[[str | None], bool],
    status: str,
    actor: str | None,
    info: dict[str, str],
) -> AckConflict:
    if actor == caller:
        return AckConflict(f"already {status} by you", metadata={**info, "actor": actor})
    if may_name(actor):
        assert actor is not None
        return AckConflict(f"already {status} by {actor}", metadata={**info, "actor": actor})
    return AckConflict(f"already {status} by another actor", metadata=info)


def sent_while_held(row: Notification) -> bool:
    """Messages went out while a person's quiet hours hold theirs (the delivery stays
    PENDING until the hold ends, the ack unset): an answer from those messages is
    honoured, like one from a delivery in flight."""
    return (
        row.status == Status.PENDING
        and row.require_ack
        and row.ack_status is None
        and bool(row.outcome.held)
        and bool(row.outcome.channels_succeeded)
    )
