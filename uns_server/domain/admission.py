"""Admitting a SendNotification: idempotency, then dedup coalescing (seed 000 §1.1, SPEC §2).

Pure: intake reads, inside its write transaction, what this request could collide with
and asks :func:`decide_admission`; it then stores the answer. What it reads is one of:

- :class:`Existing`: the notification already holding the request's idempotency key
  (committed, or admitted earlier in the same group commit);
- :class:`Fresh`: for a key nobody holds, the resolved policy and, with a dedup key,
  the dedup window row (locked until commit) and the status of its owner.

The rules, in order:

1. The key is held: the same payload fingerprint replays the stored result
   (:class:`IdempotentRepeat`, nothing written); another payload is refused with
   IDEMPOTENCY_CONFLICT (:class:`Conflict`).
2. No dedup key: a new leader, no window (:class:`Admit`, NEW).
3. The window's owner coalesces (``lifecycle.coalesces``): a PENDING owner takes the send
   as a follower (PENDING with ``dedup_owner_id``, COALESCED) whatever the window's
   ``until`` (pending ownership survives window expiry); a DELIVERED owner inside its
   window satisfies it at once (DEDUPLICATED). Both append DEDUP_LINKED after ACCEPTED
   and leave the window as it is.
4. Otherwise (no window, its owner gone, FAILED or withdrawn, or a delivery's window
   expired): a leader of a new generation (NEW), which takes the window: inserted at
   generation 1, or moved to generation + 1, open until ``now + dedup_window_seconds``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import ClassVar

from uns_server.domain.enums import EventKind, Status
from uns_server.domain.errors import IdempotencyConflict
from uns_server.domain.lifecycle import coalesces
from uns_server.domain.policy import EffectivePolicy
from uns_server.domain.records import DedupWindow


class SendOutcome(StrEnum):
    """What SendNotification does with a request (also what Simulate reports)."""

    NEW = "NEW"
    IDEMPOTENT_REPLAY = "IDEMPOTENT_REPLAY"
    IDEMPOTENCY_CONFLICT = "IDEMPOTENCY_CONFLICT"
    COALESCED = "COALESCED"
    DEDUPLICATED = "DEDUPLICATED"


# -- what intake read ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Existing:
    """The notification holding the request's idempotency key: what a replay answers."""

    id: str
    fingerprint: str
    status: Status
    effective: EffectivePolicy
    dedup_owner_id: str | None


@dataclass(frozen=True, slots=True)
class WindowOwner:
    """The notification owning a dedup window, as it stands now."""

    id: str
    status: Status


@dataclass(frozen=True, slots=True)
class Fresh:
    """What intake read for an idempotency key nobody holds."""

    effective: EffectivePolicy
    dedup_key: str | None = None
    """The dedup digest (``digests.dedup_digest``); None without a dedup key."""
    window: DedupWindow | None = None
    """The dedup window row, read under its lock; None when there is none yet."""
    owner: WindowOwner | None = None
    """The window's owner; None without a window, an owner, or when the row is gone."""


# -- the decision --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IdempotentRepeat:
    """An idempotent repeat: answer the stored result, write nothing."""

    existing: Existing
    outcome: ClassVar[SendOutcome] = SendOutcome.IDEMPOTENT_REPLAY


@dataclass(frozen=True, slots=True)
class Conflict:
    """The key was used with another payload: refuse, write nothing."""

    existing: Existing
    outcome: ClassVar[SendOutcome] = SendOutcome.IDEMPOTENCY_CONFLICT

    def error(self) -> IdempotencyConflict:
        return IdempotencyConflict(
            "idempotency key already used with a different payload",
            metadata={"notification_id": self.existing.id},
        )


@dataclass(frozen=True, slots=True)
class DedupWindowTake:
    """The dedup window a new leader takes: insert the row, or move it to this owner."""

    key: str
    owner_id: str
    generation: int
    until: datetime
    insert: bool  # no row yet (else update the one read)


@dataclass(frozen=True, slots=True)
class EventToAppend:
    """An event to append with the notification (its id, principal and type are the
    notification's)."""

    kind: EventKind
    payload: dict[str, object]


@dataclass(frozen=True, slots=True)
class Admit:
    """A new notification, and its first edge in the lifecycle diagram
    (docs/ARCHITECTURE.md): NEW is ``[*] --> PENDING`` (a leader), COALESCED is
    ``[*] --> FOLLOWING`` (PENDING with ``dedup_owner_id``), DEDUPLICATED is
    ``[*] --> DEDUPLICATED``."""

    outcome: SendOutcome
    notification_id: str
    effective: EffectivePolicy
    dedup_key: str | None
    generation: int | None
    owner: WindowOwner | None  # the leader it follows or is deduplicated into
    window: DedupWindowTake | None  # for a new leader with a dedup key
    events: tuple[EventToAppend, ...]

    @property
    def status(self) -> Status:
        return Status.DEDUPLICATED if self.outcome == SendOutcome.DEDUPLICATED else Status.PENDING

    @property
    def owner_id(self) -> str | None:
        return self.owner.id if self.owner is not None else None


IntakeDecision = IdempotentRepeat | Conflict | Admit


def decide_admission(
    fingerprint: str, read: Existing | Fresh, *, new_id: str, now: datetime
) -> IntakeDecision:
    """What to do with a send whose payload fingerprint is ``fingerprint``, given what
    was read for it under lock; ``new_id`` names the notification if one is created."""
    if isinstance(read, Existing):
        return IdempotentRepeat(read) if read.fingerprint == fingerprint else Conflict(read)
    effective, window, owner = read.effective, read.window, read.owner
    accepted = EventToAppend(EventKind.ACCEPTED, accepted_payload(effective))
    if read.dedup_key is None:
        return Admit(SendOutcome.NEW, new_id, effective, None, None, None, None, (accepted,))
    if window is not None and owner is not None and coalesces(owner.status, window.until, now):
        outcome = (
            SendOutcome.DEDUPLICATED if owner.status == Status.DELIVERED else SendOutcome.COALESCED
        )
        linked = EventToAppend(
            EventKind.DEDUP_LINKED,
            {
                "owner_id": owner.id,
                "generation": window.generation,
                "owner_status": owner.status.value,
            },
        )
        return Admit(
            outcome,
            new_id,
            effective,
            read.dedup_key,
            window.generation,
            owner,
            None,
            (accepted, linked),
        )
    generation = window.generation + 1 if window is not None else 1
    until = now + timedelta(seconds=effective.dedup_window_seconds)
    change = DedupWindowTake(read.dedup_key, new_id, generation, until, insert=window is None)
    return Admit(
        SendOutcome.NEW, new_id, effective, read.dedup_key, generation, None, change, (accepted,)
    )


def accepted_payload(effective: EffectivePolicy) -> dict[str, object]:
    """The ACCEPTED event's payload: the policy the notification was accepted under."""
    return {
        "policy_id": effective.policy_id,
        "policy_hash": effective.policy_hash,
        "revision": effective.policy_revision,
        "effective": effective.to_json(),
        "effective_hash": effective.effective_hash,
    }
