"""the ack deadline as work: an ``ack_deadline`` job for every pending acknowledgement

The ack deadline becomes a timer of the work table (``uns_jobs``, kind
``ack_deadline``, no arguments, due at the deadline): the settlement that opens an ack
inserts it in its own commit, and the expiry worker claims it
(``domain.ack_deadlines``). Each notification whose ack is already PENDING gets its
job here, due at its deadline, in one INSERT ... SELECT over the pending-ack index:
acks opened by the previous schema are timed out by the new code.

A replica of the previous release still opens acks without a job during the rollout;
the new expiry worker's carry sweep (``Acks.due_deadlines``, the pending-ack index)
times those out. A later contract step removes that sweep (and may drop
``ix_uns_notifications_ack_deadline``, which the console's counts also read).
Downgrade deletes the ``ack_deadline`` rows: the previous release sweeps the
notifications themselves.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TIME = sa.DateTime(timezone=True)
KIND = "ack_deadline"
MAX_ATTEMPTS = 3  # domain.ack_deadlines.MAX_ATTEMPTS when this was written


def upgrade() -> None:
    bind = op.get_bind()
    now = datetime.now(UTC)
    sqlite = bind.dialect.name == "sqlite"
    if sqlite:  # naive UTC text, as the application stores it
        now = now.replace(tzinfo=None)
    notifications = sa.table(
        "uns_notifications",
        sa.column("id", sa.String()),
        sa.column("ack_status", sa.String()),
        sa.column("deadline", TIME),
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
        notifications.c.deadline,
        sa.bindparam("now", now, type_=TIME),
    ).where(notifications.c.ack_status == "PENDING", notifications.c.deadline.is_not(None))
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
