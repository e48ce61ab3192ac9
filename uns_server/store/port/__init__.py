"""The store port: every store call the services and workers make, as Protocols with
domain types in their signatures (no connection, no driver row).

``Store`` hands out transactions (``async with store.write() as tx``); the
transaction's executor has one port per concern, bound to it: ``tx.dispatch``,
``tx.moves``, ``tx.follow_ups``, ``tx.jobs``, ``tx.acks``, ``tx.events``,
``tx.audit``, ``tx.notifications``, ``tx.retention``, ``tx.receipts``,
``tx.people``, ``tx.policies``, ``tx.api_keys``, ``tx.action_links``,
``tx.maintenance`` (maintenance windows and their holds), ``tx.heartbeats``, and the
samplers' ``tx.queue`` and ``tx.statistics``. A read transaction offers each port's
read half. The SQL implementation is ``store.sql_store.SqlStore`` (the queries stay in
the SQL modules; its ports bind them to the transaction's connection). The composition
root builds it once and hands it to every service and worker.

One suite, ``tests/store/test_conformance.py`` (with ``test_moves.py``), runs every
port method through a ``Store`` on SQLite and on PostgreSQL, so another
implementation (or a rewrite of a query) has one place that says what it must do:

- ``Dispatch.claim``: due, unleased (or lease-expired) PENDING leaders whose channels
  the caller serves, highest priority first, then earliest ``next_attempt``; each
  one's delivery job leased under a new token, the notification row not written
  (but for an interrupted attempt: counted, and flagged
  ``provider_effect_may_have_occurred``); concurrent claimers never share a row.
- ``Dispatch.settle_many``/``settle_leased``/``settle_leased_with_events``: fenced by
  the delivery job's lease token; a stale token changes nothing, and each says so (a
  count, the (id, token) pairs changed, ``FenceMoved``); the settle counts the attempt.
- ``FollowUps``: a step is being sent while its ``follow_up`` job runs under a live
  lease; the carry gives each due follow-up time without a live job its job, once;
  the step's writes land on the row as given (the job's settle is their fence).
- ``Jobs`` (the work table, ``tests/store/test_jobs.py``): due available or retryable
  rows of the given kinds are claimed earliest first, many in one statement, under a
  new token; a running row is never claimed again; ``settle_many`` lands only where
  the row is running under the settle's token and returns the ids that landed (a
  lost fence is an absent id); expired leases are rescued to retryable, or discarded
  with their attempts spent; only final rows are deleted.
- ``Acks.settle_pending``: only a PENDING ack settles (or an unset one whose delivery is
  in flight, or whose messages went out while a person's were held); a second settle
  reports False.
- ``Retention``: every "is this row settled?" query agrees with
  ``domain.retention.holds_work``.
- ``Events``: sequences ascend in commit order; read-after is exclusive of its cursor.
- ``Moves``: a lifecycle move changes only rows still in the state it expects, and
  says which changed.
- ``Notifications``: one row per idempotency key and one dedup window per key; the
  window is locked while read, so concurrent new generations of one key serialise. In
  a ``Store.one_statement`` write (PostgreSQL), ``insert_new_before_events`` writes its
  rows only while their keys are free and the ACTIVE revisions they were admitted
  under still hold; else the statement writes nothing (``FenceMoved``).
"""

from uns_server.store.port.console import ConsoleReads, ConsoleSessionReads, ConsoleSessions
from uns_server.store.port.delivery import (
    Acks,
    Dispatch,
    DispatchReads,
    FollowUpReads,
    FollowUps,
    Moves,
)
from uns_server.store.port.directory import (
    ActionLinkReads,
    ActionLinks,
    ApiKeyReads,
    ApiKeys,
    People,
    PeopleReads,
    Policies,
    PolicyReads,
)
from uns_server.store.port.heartbeats import HeartbeatReads, Heartbeats
from uns_server.store.port.jobs import JobReads, Jobs
from uns_server.store.port.maintenance import Maintenance, MaintenanceReads
from uns_server.store.port.notifications import NotificationReads, Notifications
from uns_server.store.port.timeline import Audit, AuditReads, EventReads, Events
from uns_server.store.port.transactions import EventTail, ReadTransaction, Store, WriteTransaction
from uns_server.store.port.upkeep import (
    PlannerStatistics,
    Queue,
    Receipts,
    Retention,
    RetentionReads,
)
from uns_server.store.port.values import (
    NOTIFICATION_FILTER_FIELDS,
    TOPIC_EVENTS,
    TOPIC_MAINTENANCE,
    TOPIC_WORK,
    Backlog,
    DeliveryAudit,
    FenceMoved,
    MissingPeople,
    NewEvent,
    PersonFirstPutRace,
    PolicyFirstPutRace,
    Statistics,
    StillReferenced,
    UnservedLeader,
)

__all__ = [
    "NOTIFICATION_FILTER_FIELDS",
    "TOPIC_EVENTS",
    "TOPIC_MAINTENANCE",
    "TOPIC_WORK",
    "Acks",
    "ActionLinkReads",
    "ActionLinks",
    "ApiKeyReads",
    "ApiKeys",
    "Audit",
    "AuditReads",
    "Backlog",
    "ConsoleReads",
    "ConsoleSessionReads",
    "ConsoleSessions",
    "DeliveryAudit",
    "Dispatch",
    "DispatchReads",
    "EventReads",
    "EventTail",
    "Events",
    "FenceMoved",
    "FollowUpReads",
    "FollowUps",
    "HeartbeatReads",
    "Heartbeats",
    "JobReads",
    "Jobs",
    "Maintenance",
    "MaintenanceReads",
    "MissingPeople",
    "Moves",
    "NewEvent",
    "NotificationReads",
    "Notifications",
    "People",
    "PeopleReads",
    "PersonFirstPutRace",
    "PlannerStatistics",
    "Policies",
    "PolicyFirstPutRace",
    "PolicyReads",
    "Queue",
    "ReadTransaction",
    "Receipts",
    "Retention",
    "RetentionReads",
    "Statistics",
    "StillReferenced",
    "Store",
    "UnservedLeader",
    "WriteTransaction",
]
