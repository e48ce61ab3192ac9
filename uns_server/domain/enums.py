"""Domain enums. Values are the seed's names, which are also the database values.

The wire enums (``uns.v1``) carry a type prefix (``NOTIFICATION_STATE_PENDING``);
the transport maps them by suffix, so these names are the single vocabulary below it.
"""

from __future__ import annotations

from enum import StrEnum


class Intent(StrEnum):
    INFORMATIONAL = "INFORMATIONAL"
    WARNING = "WARNING"
    SAFETY = "SAFETY"
    ACTION_REQUIRED = "ACTION_REQUIRED"
    ESCALATION = "ESCALATION"


class AutonomyMode(StrEnum):
    LIVE = "LIVE"
    SUPERVISED = "SUPERVISED"
    SIMULATED = "SIMULATED"
    MANUAL = "MANUAL"


class DeliveryMode(StrEnum):
    BEST_EFFORT = "BEST_EFFORT"
    GUARANTEED = "GUARANTEED"


class Priority(StrEnum):
    LOW = "LOW"
    NORMAL = "NORMAL"
    HIGH = "HIGH"
    CRITICAL = "CRITICAL"

    @property
    def rank(self) -> int:
        """Higher rank is dispatched first (stored as an integer column for ordering)."""
        return _PRIORITY_RANK[self]


_PRIORITY_RANK = {Priority.LOW: 1, Priority.NORMAL: 2, Priority.HIGH: 3, Priority.CRITICAL: 4}


class Status(StrEnum):
    """Delivery lifecycle (``uns_notifications.status``), see seed 000 §1.1.

    Who moves a row out of each state: PENDING -> dispatch workers, the leader's
    dedup settlement or a withdrawal; FAILED+dead_letter -> operators (Replay /
    ResolveFailure) or a withdrawal. DELIVERED, DEDUPLICATED and WITHDRAWN are final.
    """

    PENDING = "PENDING"
    DELIVERED = "DELIVERED"
    FAILED = "FAILED"
    DEDUPLICATED = "DEDUPLICATED"
    WITHDRAWN = "WITHDRAWN"


class AckStatus(StrEnum):
    """Acknowledgement lifecycle (``uns_notifications.ack_status``); NULL is "none"."""

    PENDING = "PENDING"
    ACKED = "ACKED"
    DISMISSED = "DISMISSED"
    TIMED_OUT = "TIMED_OUT"
    WITHDRAWN = "WITHDRAWN"
    SNOOZED = "SNOOZED"  # still owed; its reminders, steps and deadline paused


# The states in which an answer is still owed (an answer settles it, a withdrawal ends it).
ACK_OWED = frozenset({AckStatus.PENDING, AckStatus.SNOOZED})


class EventKind(StrEnum):
    """The operational event catalog (seed 000 §3)."""

    ACCEPTED = "ACCEPTED"
    DEDUP_LINKED = "DEDUP_LINKED"
    ATTEMPT_STARTED = "ATTEMPT_STARTED"
    CHANNEL_ATTEMPT_STARTED = "CHANNEL_ATTEMPT_STARTED"
    CHANNEL_ATTEMPT_RESULT = "CHANNEL_ATTEMPT_RESULT"
    LEASE_LOST = "LEASE_LOST"
    DELIVERY_RESULT = "DELIVERY_RESULT"
    OBLIGATION_HANDED_OFF = "OBLIGATION_HANDED_OFF"
    DEDUP_SATISFIED = "DEDUP_SATISFIED"
    DEDUP_OWNER_PROMOTED = "DEDUP_OWNER_PROMOTED"
    DEDUP_RELINKED = "DEDUP_RELINKED"
    ACKED = "ACKED"
    DISMISSED = "DISMISSED"
    TIMED_OUT = "TIMED_OUT"
    REPLAY_REQUESTED = "REPLAY_REQUESTED"
    FAILURE_RESOLVED = "FAILURE_RESOLVED"
    RETENTION_APPLIED = "RETENTION_APPLIED"
    WITHDRAWN = "WITHDRAWN"
    REMINDER_SENT = "REMINDER_SENT"
    ESCALATED = "ESCALATED"
    SNOOZED = "SNOOZED"
    SNOOZE_ENDED = "SNOOZE_ENDED"
    HELD = "HELD"  # a maintenance window holds it (``domain.maintenance``)


class Role(StrEnum):
    """Caller roles (SPEC §3)."""

    PRODUCER = "producer"
    RESPONDER = "responder"
    OPERATOR = "operator"


class Urgency(StrEnum):
    """How hard a person is pushed to answer (SPEC §7); None (unset) means HIGH for
    SAFETY and ACTION_REQUIRED intents, LOW otherwise."""

    HIGH = "HIGH"
    LOW = "LOW"
