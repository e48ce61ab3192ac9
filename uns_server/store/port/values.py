"""The values the port's operations take and give besides the domain's records: what a
caller hands the store to append or queue, the outcomes a fenced write reports, and
the commit topics. Defined here (not in the SQL modules) so that the layers above
name them without importing an implementation."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from uns_server.domain.enums import EventKind, Status
from uns_server.domain.records import Notification

# Commit topics: in-process callbacks after commit, and NOTIFY channels on PostgreSQL.
TOPIC_EVENTS = "uns_events"  # the transaction appended events
TOPIC_WORK = "uns_work"  # it made deliveries due
TOPIC_MAINTENANCE = "uns_maintenance"  # it changed a maintenance window


@dataclass(frozen=True)
class NewEvent:
    """An event to append to a notification's timeline."""

    notification_id: str
    principal: str
    notification_type: str
    kind: EventKind
    payload: dict[str, Any]


class Statistics(enum.Enum):
    """Whether the planner has statistics on the hot tables."""

    ANALYZED = "analyzed"  # by anyone: autovacuum, an operator, another server
    TOO_FEW_ROWS = "too few rows"
    MISSING = "missing"  # never analyzed, and big enough to matter


class FenceMoved(Exception):
    """A fenced write that rode in the events append changed fewer rows than it was
    given (a lease was lost meanwhile): the append inserted nothing, and the
    transaction must roll back (the caller redoes it the long way)."""


class PersonFirstPutRace(Exception):
    """A concurrent first put of the same person or rotation id won; a retry updates
    its row."""


class StillReferenced(Exception):
    """A rotation still names the person (the foreign key refused the delete)."""


class MissingPeople(Exception):
    """A rotation names a person that does not exist (the foreign key refused it)."""


class PolicyFirstPutRace(Exception):
    """Another transaction created this type's policy first (its unique
    ``notification_type``): this one is rolled back, and a retry finds that policy."""


# The notification fields a listing may filter on (equality).
NOTIFICATION_FILTER_FIELDS = (
    "ack_state",
    "dead_letter",
    "dedup_owner_id",
    "notification_type",
    "principal",
    "source",
    "state",
)


@dataclass(frozen=True)
class DeliveryAudit:
    """The audit record of one settled attempt: the row as leased and what it became."""

    notification: Notification
    status: Status
    outcome: Mapping[str, Any]
    delivered_at: datetime | None


@dataclass(frozen=True)
class Backlog:
    """One read of the pending leaders."""

    due: int
    leased: int
    scheduled: int
    oldest_due: datetime | None


@dataclass(frozen=True)
class UnservedLeader:
    """A due, unleased leader no replica serving ``channels`` could take: its id, its
    channels, and since when it is due."""

    notification_id: str
    channels: list[str]
    due_since: datetime
