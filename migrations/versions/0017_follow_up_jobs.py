"""follow-ups as work: a ``follow_up`` job for every pending reminder or escalation step

An ack's reminders and escalation steps become rows of the work table (``uns_jobs``,
kind ``follow_up``, no arguments, due at the next follow-up time;
``domain.follow_up_jobs``): the settlement that opens an ack inserts the first in its
own commit, and each decided step inserts the next. Every notification with a
follow-up time whose ack is PENDING (or whose step waits to be closed) and that no
follow-up lease of the previous schema holds gets its job here, in one INSERT ...
SELECT: follow-ups scheduled by the previous schema are sent by the new code.

Jobs are also looked up by the notification they serve (a withdrawal cancels a running
step; a message update waits for one), so ``uns_jobs`` gains a partial index on
``notification_id`` over its live rows.

A replica of the previous release still schedules follow-ups on the row during the
rollout (and a lease of its own held here is not carried); the new worker's carry
(``FollowUps.carry``) gives those their job once due. Downgrade deletes the
``follow_up`` rows and the index: the previous release reads the notifications.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TIME = sa.DateTime(timezone=True)
KIND = "follow_up"
MAX_ATTEMPTS = 1000  # domain.follow_up_jobs.MAX_ATTEMPTS when this was written
LIVE = "state IN ('available', 'retryable', 'running')"


def upgrade() -> None:
    op.create_index(
        "ix_uns_jobs_notification",
        "uns_jobs",
        ["notification_id", "kind"],
        postgresql_where=sa.text(LIVE),
        sqlite_where=sa.text(LIVE),
    )
    bind = op.get_bind()
    now = datetime.now(UTC)
    sqlite = bind.dialect.name == "sqlite"
    if sqlite:  # naive UTC text, as the application stores it
        now = now.replace(tzinfo=None)
    notifications = sa.table(
        "uns_notifications",
        sa.column("id", sa.String()),
        sa.column("ack_status", sa.String()),
        sa.column("followup_at", TIME),
        sa.column("followup_step", JSON),
        sa.column("followup_lease_token", sa.String()),
    )
    jobs = sa.table(
        "uns_jobs",
        *(
            sa.column(name, type_)
            for name, type_ in (
                ("kind", sa.String()),
                ("notification_id", sa.String()),
                ("args", JSON),
                ("state", sa.String()),
                ("attempt", sa.Integer()),
                ("max_attempts", sa.Integer()),
                ("scheduled_at", TIME),
                ("created_at", TIME),
            )
        ),
    )
    pending = sa.select(
        sa.literal_column(f"'{KIND}'"),
        notifications.c.id,
        sa.literal_column("'{}'" if sqlite else "'{}'::jsonb"),
        sa.literal_column("'available'"),
        sa.literal_column("0"),
        sa.literal_column(str(MAX_ATTEMPTS)),
        notifications.c.followup_at,
        sa.bindparam("now", now, type_=TIME),
    ).where(
        sa.or_(notifications.c.ack_status == "PENDING", notifications.c.followup_step.is_not(None)),
        notifications.c.followup_at.is_not(None),
        notifications.c.followup_lease_token.is_(None),
    )
    columns = [
        "kind",
        "notification_id",
        "args",
        "state",
        "attempt",
        "max_attempts",
        "scheduled_at",
        "created_at",
    ]
    bind.execute(sa.insert(jobs).from_select(columns, pending))


def downgrade() -> None:
    op.execute(sa.text(f"DELETE FROM uns_jobs WHERE kind = '{KIND}'"))
    op.drop_index("ix_uns_jobs_notification", table_name="uns_jobs")
