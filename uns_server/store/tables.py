"""The schema: one SQLAlchemy Core ``MetaData`` shared by the store and Alembic.

Column names follow seed 000 §2 (``status``, ``ack_status``, ``next_attempt``...);
times are timezone-aware UTC (``UtcDateTime``) instead of float epochs so both
dialects compare them natively. Migrations in ``migrations/`` must build exactly
this schema (``tests/store/test_migrations.py`` checks for drift).

Size: the whole schema is one file on purpose: every table of the one ``MetaData``
that Alembic compares against the migrations, read side by side.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Dialect,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    literal_column,
    text,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.sql.elements import ColumnClause
from sqlalchemy.types import TypeDecorator

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)


class UtcDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes on both dialects.

    PostgreSQL stores ``timestamptz``; SQLite stores naive UTC text, which sorts and
    compares correctly as long as every value is UTC — this type guarantees that.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to UtcDateTime")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def inline(value: str) -> ColumnClause[Any]:
    """A state or kind of ours (an enum value, never input) written into the statement,
    not bound. PostgreSQL uses a partial index (``WHERE status = 'PENDING'``...) only when
    it can prove the query's condition implies the index's, which a bound parameter never
    allows in a generic plan, and asyncpg's prepared statements may switch to one after
    a few runs: written in, the plan can use the index either way."""
    assert value.replace("_", "").isalnum(), value
    return literal_column(f"'{value}'")


# JSONB on PostgreSQL (indexable, compact), JSON text on SQLite.
Json: Any = JSON().with_variant(postgresql.JSONB(), "postgresql")
# The same, storing Python None as SQL NULL (not JSON null), so IS NULL finds it.
JsonOrNull: Any = JSON(none_as_null=True).with_variant(
    postgresql.JSONB(none_as_null=True), "postgresql"
)
# SQLite only auto-increments an INTEGER PRIMARY KEY.
BigId: Any = BigInteger().with_variant(Integer(), "sqlite")


notifications = Table(
    "uns_notifications",
    metadata,
    Column("id", String(36), primary_key=True),
    # SHA-256 of [principal, source, idempotency_key] (SPEC §2).
    Column("key", String(64), nullable=False, unique=True),
    Column("fingerprint", String(64), nullable=False),
    Column("principal", String(255), nullable=False),
    Column("notification_type", String(255), nullable=False),
    Column("source", String(255), nullable=False),
    # The request as accepted plus the frozen effective policy (``effective``).
    Column("notification", Json, nullable=False),
    Column("status", String(32), nullable=False),
    # Priority rank (higher first) and the frozen delivery settings that the
    # dispatcher needs without parsing ``notification``.
    Column("priority", Integer, nullable=False),
    Column("delivery_mode", String(16), nullable=False),
    Column("require_ack", Boolean, nullable=False),
    Column("max_attempts", Integer, nullable=False),
    Column("outcome", Json, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("cycle", Integer, nullable=False),
    Column("cycle_attempts", Integer, nullable=False),
    Column("dedup_key", String(64)),
    Column("dedup_owner_id", String(36)),
    Column("dedup_generation", Integer),
    Column("dedup_successor_id", String(36)),
    Column("next_attempt", UtcDateTime(), nullable=False),
    Column("lease_until", UtcDateTime()),
    Column("lease_token", String(36)),
    # Set when a lease expired with its provider outcome unknown (seed 003).
    Column("provider_effect_may_have_occurred", Boolean, nullable=False),
    Column("dead_letter", Boolean, nullable=False),
    Column("delivered_at", UtcDateTime()),
    Column("deadline", UtcDateTime()),
    Column("ack_status", String(32)),
    Column("actor", String(255)),
    Column("responded_at", UtcDateTime()),
    Column("response_metadata", Json),
    Column("created_at", UtcDateTime(), nullable=False),
    Column("updated_at", UtcDateTime(), nullable=False),
    # Per channel, what the provider handed back for the latest accepted message
    # (``channels.base.ChannelResult.reference``); message updates use it.
    Column("provider_refs", Json),
    # WithdrawNotification (SPEC §5): when, by whom, why.
    Column("withdrawn_at", UtcDateTime()),
    Column("withdrawn_by", String(255)),
    Column("withdraw_reason", Text),
    # Reminders and escalation steps (``workers.followups``): when the follow-up
    # worker looks at the row next (NULL: nothing to follow up), its own lease and
    # fencing token, and how many of each kind have been sent.
    Column("followup_at", UtcDateTime()),
    Column("followup_lease_token", String(36)),
    Column("followup_lease_until", UtcDateTime()),
    Column("reminders_sent", Integer, nullable=False, server_default=text("0")),
    Column("escalations_sent", Integer, nullable=False, server_default=text("0")),
    # The step being retried after a transient failure (``workers.followups``): kind,
    # number, calls made, each channel's latest answer; SQL NULL when none.
    Column("followup_step", JsonOrNull),
    # A snoozed ack (``domain.snooze``): when the snooze ends, and the pauses so far in
    # seconds (the follow-up timeline's shift).
    Column("snoozed_until", UtcDateTime()),
    Column("snoozed_seconds", Integer, nullable=False, server_default=text("0")),
    # The snoozes ended so far: the number of the latest one's reminder (migration 0023).
    Column("snoozes_ended", Integer, nullable=False, server_default=text("0")),
    # The hold a maintenance window put on a PENDING notification (``domain.maintenance``):
    # until when, and which window (migration 0020).
    Column("held_until", UtcDateTime()),
    Column("held_by_window_id", String(64)),
    # Pending acks only: the timers worker's carry sweep.
    Index(
        "ix_uns_notifications_ack_deadline",
        "deadline",
        postgresql_where=text("ack_status = 'PENDING'"),
        sqlite_where=text("ack_status = 'PENDING'"),
    ),
    # Only rows in a dedup window have these (migration 0004 says why).
    Index(
        "ix_uns_notifications_dedup_owner_id",
        "dedup_owner_id",
        postgresql_where=text("dedup_owner_id IS NOT NULL"),
        sqlite_where=text("dedup_owner_id IS NOT NULL"),
    ),
    Index(
        "ix_uns_notifications_dedup_successor_id",
        "dedup_successor_id",
        postgresql_where=text("dedup_successor_id IS NOT NULL"),
        sqlite_where=text("dedup_successor_id IS NOT NULL"),
    ),
    Index("ix_uns_notifications_principal_created_at", "principal", "created_at"),
    Index("ix_uns_notifications_status_created_at", "status", "created_at"),
    # ListNotifications by type, newest first (migration 0011).
    Index("ix_uns_notifications_type_created_at", "notification_type", "created_at"),
    Index("ix_uns_notifications_created_at", "created_at"),
    # The few rows a maintenance window holds, by window: its end releases them.
    Index(
        "ix_uns_notifications_held_by_window_id",
        "held_by_window_id",
        postgresql_where=text("held_by_window_id IS NOT NULL"),
        sqlite_where=text("held_by_window_id IS NOT NULL"),
    ),
    # Rows with follow-ups still to send: the follow-up worker's sweep.
    Index(
        "ix_uns_notifications_followup_at",
        "followup_at",
        postgresql_where=text("followup_at IS NOT NULL"),
        sqlite_where=text("followup_at IS NOT NULL"),
    ),
)

# Due leaders only, in the claim query's exact order (priority DESC, next_attempt):
# with any other order PostgreSQL sorts every pending row on each claim.
Index(
    "ix_uns_notifications_due",
    notifications.c.priority.desc(),
    notifications.c.next_attempt,
    postgresql_where=text("status = 'PENDING' AND dedup_owner_id IS NULL"),
    sqlite_where=text("status = 'PENDING' AND dedup_owner_id IS NULL"),
)

# Dead letters only (few among many FAILED rows), newest first: the console's
# "needs action" bucket and count (migration 0010).
Index(
    "ix_uns_notifications_dead_letters",
    notifications.c.created_at,
    postgresql_where=text("status = 'FAILED' AND dead_letter"),
    sqlite_where=text("status = 'FAILED' AND dead_letter"),
)

# The other FAILED rows (resolved, or never needing action), newest first: the console's
# "resolved" bucket and its count, index-only (migration 0011).
Index(
    "ix_uns_notifications_resolved_failures",
    notifications.c.created_at,
    postgresql_where=text("status = 'FAILED' AND NOT dead_letter"),
    sqlite_where=text("status = 'FAILED' AND NOT dead_letter"),
)

events = Table(
    "uns_events",
    metadata,
    # The WatchEvents cursor. Writers allocate it in commit order (see
    # ``store.events``), so "everything after N" never skips a late commit.
    Column("sequence", BigId, primary_key=True, autoincrement=True),
    Column("id", String(36), nullable=False, unique=True),
    Column("notification_id", String(36), nullable=False, index=True),
    # Denormalised so WatchEvents can filter without a join.
    Column("principal", String(255), nullable=False),
    Column("notification_type", String(255), nullable=False),
    Column("kind", String(50), nullable=False),
    Column("at", UtcDateTime(), nullable=False),
    Column("payload", Json, nullable=False),
    # WatchEvents catch-up by principal or type reads only matching events (0013).
    Index("ix_uns_events_principal_sequence", "principal", "sequence"),
    Index("ix_uns_events_type_sequence", "notification_type", "sequence"),
    sqlite_autoincrement=True,  # never reuse a sequence after retention deletes rows
)

dedup = Table(
    "uns_dedup",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("until", UtcDateTime(), nullable=False),
    Column("owner_id", String(36)),
    Column("generation", Integer, nullable=False),
)

notification_audit_records = Table(
    "notification_audit_records",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("notification_id", String(36), nullable=False, index=True),
    Column("notification_type", String(255), nullable=False),
    Column("status", String(32), nullable=False),
    Column("channels_attempted", Json, nullable=False),
    Column("channels_succeeded", Json, nullable=False),
    Column("channels_failed", Json, nullable=False),
    Column("error_message", Text),
    Column("intent", String(32), nullable=False),
    Column("delivery_mode", String(16), nullable=False),
    Column("autonomy_mode", String(32)),
    Column("agent_id", String(255)),
    Column("policy_config_id", String(36)),
    Column("policy_config_hash", String(64)),
    Column("delivered_at", UtcDateTime()),
    Column("created_at", UtcDateTime(), nullable=False),
)

ack_audit_records = Table(
    "ack_audit_records",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("notification_id", String(36), nullable=False, index=True),
    Column("old_status", String(32)),
    Column("new_status", String(32), nullable=False),
    Column("acked_by", String(255), nullable=False),
    Column("acked_at", UtcDateTime(), nullable=False),
    Column("ack_metadata", Json),
    Column("created_at", UtcDateTime(), nullable=False),
    # The channel the answer came from: grpc, link, slack, pagerduty, expiry.
    Column("via", String(64)),
)

policies = Table(
    "uns_policies",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("notification_type", String(255), nullable=False, unique=True),
    Column("active_revision", Integer),
    Column("created_at", UtcDateTime(), nullable=False),
    Column("updated_at", UtcDateTime(), nullable=False),
)

policy_revisions = Table(
    "uns_policy_revisions",
    metadata,
    Column("policy_id", String(36), ForeignKey("uns_policies.id"), nullable=False),
    Column("revision", Integer, nullable=False),
    Column("content", Json, nullable=False),
    Column("content_hash", String(64), nullable=False),
    Column("created_by", String(255), nullable=False),
    Column("created_at", UtcDateTime(), nullable=False),
    Column("activated_at", UtcDateTime()),
    PrimaryKeyConstraint("policy_id", "revision"),
)

api_keys = Table(
    "uns_api_keys",
    metadata,
    Column("id", String(36), primary_key=True),
    # SHA-256 of the secret: keys are 256-bit random, so a fast hash is enough
    # and lookups stay O(1) per call.
    Column("key_hash", String(64), nullable=False, unique=True),
    # First characters of the key, shown in listings to tell keys apart.
    Column("prefix", String(16), nullable=False),
    Column("principal", String(255), nullable=False),
    Column("roles", Json, nullable=False),
    # Principals a responder key answers for besides its own (SPEC §3 tenancy).
    Column("responds_for", Json, nullable=False, server_default=text("'[]'")),
    Column("description", String(255), nullable=False),
    Column("created_at", UtcDateTime(), nullable=False),
    Column("revoked_at", UtcDateTime()),
)

maintenance = Table(
    "uns_maintenance",
    metadata,
    # One row per maintained history; "uns_events" holds the WatchEvents horizon.
    Column("name", String(64), primary_key=True),
    # The highest event sequence that retention deleted: a resume cursor below it
    # may have lost events, so WatchEvents refuses it (HISTORY_COMPACTED).
    Column("compacted_sequence", BigInteger, nullable=False),
    Column("updated_at", UtcDateTime(), nullable=False),
)

# The work table (SPEC §7 "One work engine"; River's ``river_job``): every timed piece
# of work is one narrow row, claimed in batches under a lease and a fencing token,
# settled by one fenced statement, rescued when its lease expires, deleted once final
# and old (states and who moves them: ``domain.jobs``). Kinds so far: message_update.
DELIVERY_LIVE = "kind = 'delivery' AND state IN ('available', 'retryable', 'running')"
DELIVERY_DUE = "kind = 'delivery' AND state IN ('available', 'retryable')"
jobs = Table(
    "uns_jobs",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("kind", String(32), nullable=False),
    Column("notification_id", String(36)),  # the obligation it serves, if any
    Column("args", Json, nullable=False),  # small typed arguments, per kind
    Column("state", String(16), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("max_attempts", Integer, nullable=False),
    Column("scheduled_at", UtcDateTime(), nullable=False),
    Column("attempted_at", UtcDateTime()),
    Column("finalized_at", UtcDateTime()),
    Column("lease_token", String(36)),
    Column("lease_until", UtcDateTime()),
    Column("last_error", Text),
    Column("created_at", UtcDateTime(), nullable=False),
    # Claimed first once due (a delivery's: its notification's priority; 0 otherwise).
    Column("priority", Integer, nullable=False, server_default=text("0")),
    # The rescuer: leases of running rows, by expiry.
    Index(
        "ix_uns_jobs_running",
        "kind",
        "lease_until",
        postgresql_where=text("state = 'running'"),
        sqlite_where=text("state = 'running'"),
    ),
    # The live work of one notification (a withdrawal cancels its running step).
    Index(
        "ix_uns_jobs_notification",
        "notification_id",
        "kind",
        postgresql_where=text("state IN ('available', 'retryable', 'running')"),
        sqlite_where=text("state IN ('available', 'retryable', 'running')"),
    ),
    # Retention: final rows, by when they became final.
    Index(
        "ix_uns_jobs_finalized",
        "finalized_at",
        postgresql_where=text("finalized_at IS NOT NULL"),
        sqlite_where=text("finalized_at IS NOT NULL"),
    ),
)

# The claim: due rows of a kind in claim order (priority DESC, scheduled_at, id).
Index(
    "ix_uns_jobs_due",
    jobs.c.kind,
    jobs.c.priority.desc(),
    jobs.c.scheduled_at,
    jobs.c.id,
    postgresql_where=text("state IN ('available', 'retryable')"),
    sqlite_where=text("state IN ('available', 'retryable')"),
)
# The dispatcher's next due time: the first claimable delivery job by due time
# (``SqlDispatch.next_due_at``, one index entry, whatever the priorities).
Index(
    "ix_uns_jobs_delivery_due",
    jobs.c.scheduled_at,
    postgresql_where=text(DELIVERY_DUE),
    sqlite_where=text(DELIVERY_DUE),
)
# At most one live delivery job per notification: the places that make a leader due
# insert it or, when one is live, retime it (``store.deliveries``, ON CONFLICT).
Index(
    "ux_uns_jobs_delivery",
    jobs.c.notification_id,
    unique=True,
    postgresql_where=text(DELIVERY_LIVE),
    sqlite_where=text(DELIVERY_LIVE),
)

# Before ``uns_jobs`` (migration 0015): the message-update outbox. Nothing writes it
# but replicas of the previous release during a rolling upgrade; its PENDING rows are
# carried into ``uns_jobs`` (the migration, then ``Jobs.carry_message_updates`` each
# round). To be dropped by a later contract migration, once no such replica is left.
message_updates = Table(
    "uns_message_updates",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("notification_id", String(36), nullable=False, index=True),
    Column("channel", String(64), nullable=False),
    Column("reference", Json, nullable=False),  # the provider reference to update
    Column("outcome", Json, nullable=False),  # what to show: state, actor, via, at
    Column("status", String(16), nullable=False),  # PENDING -> DONE | FAILED
    Column("attempts", Integer, nullable=False),
    Column("next_attempt", UtcDateTime(), nullable=False),
    Column("lease_until", UtcDateTime()),
    Column("lease_token", String(36)),
    Column("last_error", Text),
    Column("created_at", UtcDateTime(), nullable=False),
    Column("updated_at", UtcDateTime(), nullable=False),
    Index(
        "ix_uns_message_updates_due",
        "next_attempt",
        postgresql_where=text("status = 'PENDING'"),
        sqlite_where=text("status = 'PENDING'"),
    ),
)

# Revoked action links, by SHA-256 of the token: the tokens themselves are never stored.
revoked_links = Table(
    "uns_revoked_links",
    metadata,
    Column("token_hash", String(64), primary_key=True),
    Column("notification_id", String(36), nullable=False),
    Column("revoked_by", String(255), nullable=False),
    Column("revoked_at", UtcDateTime(), nullable=False),
)

# Provider callbacks already accepted (digest of provider + signature): a replayed
# request is refused even inside its signature's freshness window.
callback_receipts = Table(
    "uns_callback_receipts",
    metadata,
    Column("digest", String(64), primary_key=True),
    Column("provider", String(32), nullable=False),
    Column("received_at", UtcDateTime(), nullable=False, index=True),
)

# Operator console sign-ins (uns_server/http/console): a table, so every replica
# behind a load balancer knows every session. Only SHA-256 of the session id is
# stored; the CSRF token is bound to the session. ``key_hash`` is the API key the
# operator signed in with, re-checked on each request so a revoked key ends its
# sessions too.
console_sessions = Table(
    "uns_console_sessions",
    metadata,
    Column("id_hash", String(64), primary_key=True),
    Column("principal", String(255), nullable=False),
    Column("key_hash", String(64), nullable=False),
    Column("csrf_token", String(64), nullable=False),
    Column("created_at", UtcDateTime(), nullable=False),
    Column("last_seen_at", UtcDateTime(), nullable=False),
    Column("expires_at", UtcDateTime(), nullable=False, index=True),  # absolute expiry
)

# People and on-call rotations (SPEC §6). Contacts, quiet hours, members and overrides
# are JSON (read and written whole); ``uns_rotation_refs`` lists every recipient a
# rotation names (members and overrides) with a foreign key, so the database itself
# refuses to delete a person still referenced, even against a concurrent put.
recipients = Table(
    "uns_recipients",
    metadata,
    Column("recipient_id", String(64), primary_key=True),
    Column("display_name", String(255), nullable=False),
    Column("time_zone", String(64), nullable=False),
    Column("contacts", Json, nullable=False),
    Column("quiet_hours", JsonOrNull),
    Column("created_at", UtcDateTime(), nullable=False),
    Column("updated_at", UtcDateTime(), nullable=False),
    Column("updated_by", String(255), nullable=False),
    # BCP 47, canonical; "" when none (SPEC §7, templates). Migration 0018.
    Column("locale", String(35), nullable=False, server_default=""),
    # Staged rules (SPEC §7), a JSON list; NULL when none. Migration 0021.
    Column("notification_rules", JsonOrNull),
)

rotations = Table(
    "uns_rotations",
    metadata,
    Column("rotation_id", String(64), primary_key=True),
    Column("members", Json, nullable=False),
    Column("start_time", UtcDateTime(), nullable=False),
    Column("shift_seconds", BigInteger, nullable=False),
    Column("time_zone", String(64), nullable=False),
    Column("overrides", Json, nullable=False),
    Column("created_at", UtcDateTime(), nullable=False),
    Column("updated_at", UtcDateTime(), nullable=False),
    Column("updated_by", String(255), nullable=False),
)

rotation_refs = Table(
    "uns_rotation_refs",
    metadata,
    Column(
        "rotation_id",
        String(64),
        ForeignKey("uns_rotations.rotation_id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column(
        "recipient_id",
        String(64),
        ForeignKey("uns_recipients.recipient_id"),
        nullable=False,
        index=True,
    ),
    PrimaryKeyConstraint("rotation_id", "recipient_id"),
)

# Every write to people and rotations: who, when, what (the content after a put; the
# content before a delete), append-only like the other audit tables.
people_audit_records = Table(
    "uns_people_audit_records",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("kind", String(16), nullable=False),  # recipient | rotation
    Column("object_id", String(64), nullable=False),
    Column("action", String(16), nullable=False),  # PUT | DELETE
    Column("actor", String(255), nullable=False),
    Column("content", Json, nullable=False),
    Column("created_at", UtcDateTime(), nullable=False, index=True),
)

# Maintenance windows (SPEC §7 "Quiet on purpose", ``domain.maintenance``; migration
# 0020): the types a window holds while open, and who put it.
maintenance_windows = Table(
    "uns_maintenance_windows",
    metadata,
    Column("window_id", String(64), primary_key=True),
    Column("start_time", UtcDateTime(), nullable=False),
    Column("end_time", UtcDateTime(), nullable=False, index=True),
    Column("notification_types", Json, nullable=False),
    Column("reason", Text, nullable=False),
    Column("created_at", UtcDateTime(), nullable=False),
    Column("updated_at", UtcDateTime(), nullable=False),
    Column("updated_by", String(255), nullable=False),
)

maintenance_audit_records = Table(
    "uns_maintenance_audit_records",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("window_id", String(64), nullable=False, index=True),
    Column("action", String(16), nullable=False),  # PUT | DELETE
    Column("actor", String(255), nullable=False),
    Column("content", Json, nullable=False),
    Column("created_at", UtcDateTime(), nullable=False),
)


# Heartbeats (SPEC §7 "Alerts in"; ``domain.heartbeats``): what the operator put, the
# last beat (a beat is an UPDATE of that one column), the page of the current or last
# silence, and the id of the one live ``heartbeat_deadline`` job. Migration 0022.
heartbeats = Table(
    "uns_heartbeats",
    metadata,
    Column("heartbeat_id", String(64), primary_key=True),
    Column("notification_type", String(255), nullable=False),
    Column("interval_seconds", BigInteger, nullable=False),
    Column("grace_seconds", BigInteger, nullable=False),
    Column("title", Text, nullable=False),
    Column("message", Text, nullable=False),
    Column("armed_at", UtcDateTime(), nullable=False),
    Column("last_beat_at", UtcDateTime()),
    Column("paging", Boolean, nullable=False),
    Column("notification_id", String(36)),
    Column("page_error", Text, nullable=False),
    Column("job_id", BigId),
    Column("created_at", UtcDateTime(), nullable=False),
    Column("updated_at", UtcDateTime(), nullable=False),
    Column("updated_by", String(255), nullable=False),
)
