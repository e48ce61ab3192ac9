"""Typed records: what the store hands the layers above, one frozen value per row.

The store builds them (``store/records.py``) from SQLAlchemy ``RowMapping``s and
asyncpg ``Record``s alike; services, workers, api and http read fields (``rec.status``),
which mypy checks, instead of ``row["status"]``, which it cannot. A change is never a
mutation: the caller asks the domain for a decision and hands the store new values, so
a record is frozen (and slotted: cheap to build on the hot path, no stray attributes).
The notification document, the delivery outcome, the provider references and a
follow-up step's progress are typed (``domain.documents.NotificationDocument``,
``domain.outcomes.DeliveryOutcome``, ``ProviderRef``, ``domain.schedule.StepProgress``,
parsed once per row read); other JSON columns stay
the decoded ``Mapping``/``list`` the driver returned (read-only by convention: frozen
is shallow). Columns that hold a domain enum carry the enum.

``PolicyRevision`` is ``domain.policy.PolicyRevision`` (re-exported here): it already was
the typed value of a policy revision row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from operator import attrgetter
from typing import Any

from uns_server.domain.documents import NotificationDocument
from uns_server.domain.enums import AckStatus, DeliveryMode, EventKind, Role, Status
from uns_server.domain.jobs import JobKind, JobState
from uns_server.domain.outcomes import DeliveryOutcome, ProviderRefs
from uns_server.domain.policy import PolicyRevision
from uns_server.domain.schedule import StepProgress

__all__ = [
    "AckAuditRecord",
    "ApiKey",
    "Attempt",
    "ConsoleSession",
    "DedupWindow",
    "DeliveryAuditRecord",
    "Event",
    "FailedSummary",
    "Job",
    "Notification",
    "PolicyRevision",
    "PolicyType",
    "RecentEvent",
    "RetentionCandidate",
]

Json = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Notification:
    """One ``uns_notifications`` row (``store.tables.notifications``), column for column."""

    id: str
    key: str
    """SHA-256 of (principal, source, idempotency key)."""
    fingerprint: str
    principal: str
    notification_type: str
    source: str
    notification: NotificationDocument
    """The request as accepted plus the frozen effective policy (``effective``)."""
    status: Status
    priority: int
    """``Priority.rank``: higher is dispatched first."""
    delivery_mode: DeliveryMode
    require_ack: bool
    max_attempts: int
    outcome: DeliveryOutcome
    attempts: int
    cycle: int
    cycle_attempts: int
    dedup_key: str | None
    dedup_owner_id: str | None
    """Set on a follower: the leader whose attempt carries its obligation."""
    dedup_generation: int | None
    dedup_successor_id: str | None
    next_attempt: datetime
    lease_until: datetime | None
    lease_token: str | None
    provider_effect_may_have_occurred: bool
    dead_letter: bool
    delivered_at: datetime | None
    deadline: datetime | None
    ack_status: AckStatus | None
    actor: str | None
    responded_at: datetime | None
    response_metadata: Json | None
    created_at: datetime
    updated_at: datetime
    provider_refs: ProviderRefs | None
    withdrawn_at: datetime | None
    withdrawn_by: str | None
    withdraw_reason: str | None
    followup_at: datetime | None
    followup_lease_token: str | None
    followup_lease_until: datetime | None
    reminders_sent: int
    escalations_sent: int
    followup_step: StepProgress | None
    snoozed_until: datetime | None = None  # while the ack is SNOOZED (``domain.snooze``)
    snoozed_seconds: int = 0  # the pauses so far: the follow-up timeline's shift
    # A maintenance window's hold (``domain.maintenance``): until when, and which.
    held_until: datetime | None = None
    held_by_window_id: str | None = None
    snoozes_ended: int = 0  # the number of the latest snooze's reminder (``domain.snooze``)

    @property
    def is_follower(self) -> bool:
        """A pending follower (FOLLOWING in the diagram): never claimed itself."""
        return self.dedup_owner_id is not None

    def leased(self, token: str, until: datetime) -> Notification:
        """A copy under a delivery lease: a new leader as the accepting transaction
        inserts it (``workers.dispatch.Dispatcher.lease_new``), the lease going to its
        delivery job. What ``dataclasses.replace`` would build, at half its cost (it
        runs once per accepted leader): its field values in order, two of them replaced."""
        values = list(_NOTIFICATION_VALUES(self))
        values[_N_LEASE_TOKEN], values[_N_LEASE_UNTIL] = token, until
        return Notification(*values)


_N_FIELDS = [f.name for f in fields(Notification)]
_NOTIFICATION_VALUES = attrgetter(*_N_FIELDS)
_N_LEASE_TOKEN = _N_FIELDS.index("lease_token")
_N_LEASE_UNTIL = _N_FIELDS.index("lease_until")


@dataclass(frozen=True, slots=True)
class Attempt:
    """What a dispatch claim hands a worker: one leased leader.

    ``notification`` is the row as it was *before* the claim, so its counters are the
    previous attempt's (``domain.lifecycle.decide_claim`` takes them as they are) and
    its ``lease_token`` is the previous lease's, if any. ``lease_token`` here is the new
    fencing token every settlement must present. ``recovered``: the row still carried an
    expired lease, so that attempt never reported back and its provider effect is
    unknown (the claim flags the row ``provider_effect_may_have_occurred``).
    """

    notification: Notification
    lease_token: str
    recovered: bool

    @property
    def attempt(self) -> int:
        """This attempt's number overall, if it is made."""
        return self.notification.attempts + 1

    @property
    def cycle_attempt(self) -> int:
        """This attempt's number in its cycle, if it is made."""
        return self.notification.cycle_attempts + 1


@dataclass(frozen=True, slots=True)
class Event:
    """One ``uns_events`` row: a committed step of a notification's timeline."""

    sequence: int
    """The WatchEvents cursor, allocated in commit order."""
    id: str
    notification_id: str
    principal: str
    notification_type: str
    kind: EventKind
    at: datetime
    payload: Json


@dataclass(frozen=True, slots=True)
class DedupWindow:
    """One ``uns_dedup`` row: the coalescing window of a dedup key."""

    key: str
    until: datetime
    owner_id: str | None
    generation: int


@dataclass(frozen=True, slots=True)
class ApiKey:
    """One ``uns_api_keys`` row. The secret itself is never stored, only its SHA-256."""

    id: str
    key_hash: str
    prefix: str
    """The key's first characters, to tell keys apart in listings."""
    principal: str
    roles: tuple[Role, ...]
    responds_for: tuple[str, ...]
    description: str
    created_at: datetime
    revoked_at: datetime | None


@dataclass(frozen=True, slots=True)
class DeliveryAuditRecord:
    """One ``notification_audit_records`` row (seed 000 §2.4): a settled attempt."""

    id: str
    notification_id: str
    notification_type: str
    status: Status
    channels_attempted: Sequence[str]
    channels_succeeded: Sequence[str]
    channels_failed: Sequence[str]
    error_message: str | None
    intent: str
    """The request's intent ("" when it had none)."""
    delivery_mode: DeliveryMode
    autonomy_mode: str | None
    agent_id: str | None
    policy_config_id: str | None
    policy_config_hash: str | None
    delivered_at: datetime | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class AckAuditRecord:
    """One ``ack_audit_records`` row: an acknowledgement settlement."""

    id: str
    notification_id: str
    old_status: AckStatus | None
    new_status: AckStatus
    acked_by: str
    acked_at: datetime
    ack_metadata: Json | None
    created_at: datetime
    via: str | None
    """grpc, link, slack, pagerduty or expiry."""


@dataclass(frozen=True, slots=True)
class Job:
    """One ``uns_jobs`` row: a timed piece of work (``domain.jobs``)."""

    id: int
    kind: JobKind
    notification_id: str | None
    args: Json
    """Small arguments, parsed by the kind that reads them."""
    state: JobState
    attempt: int
    """Attempts started (each claim counts one)."""
    max_attempts: int
    scheduled_at: datetime
    attempted_at: datetime | None
    finalized_at: datetime | None
    lease_token: str | None
    """The fencing token of the claim that holds it (running only)."""
    lease_until: datetime | None
    last_error: str | None
    created_at: datetime
    priority: int = 0
    """Claimed before lower ones once due (a delivery's: its notification's)."""


@dataclass(frozen=True, slots=True)
class ConsoleSession:
    """One ``uns_console_sessions`` row (only the SHA-256 of the session id is kept)."""

    id_hash: str
    principal: str
    key_hash: str
    """The signing-in API key's hash, re-checked so revoking the key ends the session."""
    csrf_token: str
    created_at: datetime
    last_seen_at: datetime
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class RetentionCandidate:
    """A settled notification retention may prune (``store.retention.SqlRetention.settled_before``),
    with its dedup links: a row of its group that must stay keeps it too."""

    id: str
    dedup_owner_id: str | None
    dedup_successor_id: str | None

    @property
    def links(self) -> tuple[str, ...]:
        """The notifications it links to (its owner, its successor)."""
        return tuple(t for t in (self.dedup_owner_id, self.dedup_successor_id) if t)


# -- the operator console's bounded reads (``store.console``): projections, not rows ---


@dataclass(frozen=True, slots=True)
class FailedSummary:
    """A FAILED notification as a triage bucket lists it (``store.console.failed``)."""

    id: str
    notification_type: str
    source: str
    principal: str
    outcome: DeliveryOutcome
    attempts: int
    cycle: int
    created_at: datetime
    updated_at: datetime
    dedup_successor_id: str | None
    title: str = ""
    channels: tuple[str, ...] = ()  # its effective policy's


@dataclass(frozen=True, slots=True)
class RecentEvent:
    """An event as the overview's health digest reads it (``store.console.recent_events``):
    the payload's few fields it needs, taken out by the query."""

    sequence: int
    kind: EventKind
    at: datetime
    notification_id: str
    channel: str | None
    success: bool | None
    error: str | None
    status: str | None
    """DELIVERY_RESULT's status (a ``Status`` value)."""


@dataclass(frozen=True, slots=True)
class PolicyType:
    """A notification type with a policy (``store.console.policy_types``)."""

    notification_type: str
    active_revision: int | None
    updated_at: datetime
