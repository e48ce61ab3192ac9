"""deliveries as work: a priority on the work table, one live delivery job per leader

Deliveries move onto the work table (kind ``delivery``): every PENDING leader has one
live job (available, retryable or running), due at its ``next_attempt``, and the
dispatcher claims those jobs. ``uns_jobs`` gains River's ``priority`` (a delivery's
is its notification's; 0 for the other kinds, so their claim order is unchanged) and
the due index orders by it. A unique partial index keeps one live delivery job per
notification, so the writes that make a leader due insert or retime it in one
statement (``ON CONFLICT``). A delivery job carries its notification's effective
channels (``args.channels``): the claim takes jobs without reading the notifications
(their served test), and the dispatcher's next due time is the first entry of the
claimable delivery jobs' index by due time (``ix_uns_jobs_delivery_due``).

Pending work of a running deployment is carried: every PENDING leader without a live
delivery job gets one, due at its ``next_attempt``, in one statement. A row a replica
of the previous release holds leased gets one too: the claim still takes the
notification's lease, so the job waits until that lease ends (settled, or expired and
then recovered). Leaders a previous replica accepts during the rollout are carried by
the new dispatcher (``Jobs.carry_deliveries``). Downgrade drops the delivery jobs, the
index and the column.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CLAIMABLE = "state IN ('available', 'retryable')"
DELIVERY_DUE = "kind = 'delivery' AND state IN ('available', 'retryable')"
DELIVERY_LIVE = "kind = 'delivery' AND state IN ('available', 'retryable', 'running')"
MAX_ATTEMPTS = 2**31 - 1  # domain.jobs.DELIVERY_MAX_ATTEMPTS


def upgrade() -> None:
    with op.batch_alter_table("uns_jobs") as batch:
        batch.add_column(
            sa.Column("priority", sa.Integer(), nullable=False, server_default=sa.text("0"))
        )
    op.drop_index("ix_uns_jobs_due", table_name="uns_jobs")
    op.create_index(
        "ix_uns_jobs_due",
        "uns_jobs",
        ["kind", sa.text("priority DESC"), "scheduled_at", "id"],
        postgresql_where=sa.text(CLAIMABLE),
        sqlite_where=sa.text(CLAIMABLE),
    )
    op.create_index(
        "ix_uns_jobs_delivery_due",
        "uns_jobs",
        ["scheduled_at"],
        postgresql_where=sa.text(DELIVERY_DUE),
        sqlite_where=sa.text(DELIVERY_DUE),
    )
    op.create_index(
        "ux_uns_jobs_delivery",
        "uns_jobs",
        ["notification_id"],
        unique=True,
        postgresql_where=sa.text(DELIVERY_LIVE),
        sqlite_where=sa.text(DELIVERY_LIVE),
    )
    _carry_deliveries()


def _carry_deliveries() -> None:
    bind = op.get_bind()
    now = datetime.now(UTC)
    if bind.dialect.name == "sqlite":  # naive UTC text, as the application stores it
        now = now.replace(tzinfo=None)
    # The job carries its notification's effective channels (the claim's served test).
    args = (
        "jsonb_build_object('channels', n.notification -> 'effective' -> 'channels')"
        if bind.dialect.name == "postgresql"
        else "json_object('channels', json(json_extract(n.notification, '$.effective.channels')))"
    )
    live = f"j.notification_id = n.id AND j.{DELIVERY_LIVE}".replace("state IN", "j.state IN")
    bind.execute(
        sa.text(
            "INSERT INTO uns_jobs (kind, notification_id, args, state, attempt, max_attempts,"
            " scheduled_at, created_at, priority)"
            f" SELECT 'delivery', n.id, {args}, 'available', 0, :max_attempts,"
            " n.next_attempt, :now, n.priority FROM uns_notifications AS n"
            " WHERE n.status = 'PENDING' AND n.dedup_owner_id IS NULL"
            f" AND NOT EXISTS (SELECT 1 FROM uns_jobs AS j WHERE {live})"
        ).bindparams(
            sa.bindparam("max_attempts", MAX_ATTEMPTS),
            sa.bindparam("now", now, type_=sa.DateTime(timezone=True)),
        )
    )


def downgrade() -> None:
    op.execute(sa.text("DELETE FROM uns_jobs WHERE kind = 'delivery'"))
    op.drop_index("ux_uns_jobs_delivery", table_name="uns_jobs")
    op.drop_index("ix_uns_jobs_delivery_due", table_name="uns_jobs")
    op.drop_index("ix_uns_jobs_due", table_name="uns_jobs")
    with op.batch_alter_table("uns_jobs") as batch:
        batch.drop_column("priority")
    op.create_index(
        "ix_uns_jobs_due",
        "uns_jobs",
        ["kind", "scheduled_at", "id"],
        postgresql_where=sa.text(CLAIMABLE),
        sqlite_where=sa.text(CLAIMABLE),
    )
