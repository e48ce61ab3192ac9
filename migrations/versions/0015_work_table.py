"""the work table: ``uns_jobs``, and the pending message updates carried into it

``uns_jobs`` (SPEC §7 "One work engine", River's ``river_job``): one narrow row per
timed piece of work: its kind, the notification it serves, small JSON arguments, a
state (available, running, retryable, completed, discarded, cancelled), the attempt
and its bound, when it is due, its lease token and expiry, its last error. Partial
indexes: due rows in claim order (``kind, scheduled_at, id`` of available and
retryable rows), running rows by lease expiry (the rescuer), final rows by
``finalized_at`` (retention). A new table: its indexes are built with it, nothing
existing is locked.

Message updates move onto it (kind ``message_update``, arguments channel, reference,
outcome). The PENDING rows of ``uns_message_updates`` that no live lease holds are
carried over here (attempts, due time and last error kept; retryable once attempted)
and deleted there, in one statement each: an outbox of a running deployment holds few
pending rows. Rows a replica of the previous release still holds, or queues during
the rollout, are carried by the new worker each round (``Jobs.carry_message_updates``).
``uns_message_updates`` stays for those replicas; a later contract migration drops it.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TIME = sa.DateTime(timezone=True)
CLAIMABLE = "state IN ('available', 'retryable')"
RUNNING = "state = 'running'"
FINALIZED = "finalized_at IS NOT NULL"
MAX_ATTEMPTS = 10  # domain.message_updates.MAX_ATTEMPTS when this was written


def upgrade() -> None:
    op.create_table(
        "uns_jobs",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("notification_id", sa.String(length=36), nullable=True),
        sa.Column("args", JSON, nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("scheduled_at", TIME, nullable=False),
        sa.Column("attempted_at", TIME, nullable=True),
        sa.Column("finalized_at", TIME, nullable=True),
        sa.Column("lease_token", sa.String(length=36), nullable=True),
        sa.Column("lease_until", TIME, nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", TIME, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_uns_jobs")),
    )
    for name, columns, where in (
        ("ix_uns_jobs_due", ["kind", "scheduled_at", "id"], CLAIMABLE),
        ("ix_uns_jobs_running", ["kind", "lease_until"], RUNNING),
        ("ix_uns_jobs_finalized", ["finalized_at"], FINALIZED),
    ):
        op.create_index(
            name,
            "uns_jobs",
            columns,
            postgresql_where=sa.text(where),
            sqlite_where=sa.text(where),
        )
    _carry_message_updates()


def _carry_message_updates() -> None:
    bind = op.get_bind()
    now = datetime.now(UTC)
    if bind.dialect.name == "sqlite":  # naive UTC text, as the application stores it
        now = now.replace(tzinfo=None)
    old = sa.table(
        "uns_message_updates",
        sa.column("id", sa.String()),
        sa.column("notification_id", sa.String()),
        sa.column("channel", sa.String()),
        sa.column("reference", JSON),
        sa.column("outcome", JSON),
        sa.column("status", sa.String()),
        sa.column("attempts", sa.Integer()),
        sa.column("next_attempt", TIME),
        sa.column("lease_until", TIME),
        sa.column("last_error", sa.Text()),
        sa.column("created_at", TIME),
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
                ("last_error", sa.Text()),
                ("created_at", TIME),
            )
        ),
    )
    unleased = (
        sa.select(old.c.id)
        .where(
            old.c.status == "PENDING",
            sa.or_(old.c.lease_until.is_(None), old.c.lease_until <= now),
        )
        .with_for_update(skip_locked=True)
    )
    carried = bind.execute(
        sa.delete(old).where(old.c.id.in_(unleased.scalar_subquery())).returning(*old.c)
    ).mappings()
    rows = [
        {
            "kind": "message_update",
            "notification_id": row["notification_id"],
            "args": {
                "channel": row["channel"],
                "reference": row["reference"],
                "outcome": row["outcome"],
            },
            "state": "retryable" if row["attempts"] else "available",
            "attempt": row["attempts"],
            "max_attempts": MAX_ATTEMPTS,
            "scheduled_at": row["next_attempt"],
            "last_error": row["last_error"],
            "created_at": row["created_at"],
        }
        for row in carried
    ]
    if rows:
        bind.execute(sa.insert(jobs), rows)


def downgrade() -> None:
    for name in ("ix_uns_jobs_finalized", "ix_uns_jobs_running", "ix_uns_jobs_due"):
        op.drop_index(name, table_name="uns_jobs")
    op.drop_table("uns_jobs")
