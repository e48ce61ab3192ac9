"""maintenance windows (SPEC §7 "Quiet on purpose") and the hold on a notification

``uns_maintenance_windows``: one row per window (start, end, the types it holds, why,
who put it). ``uns_maintenance_audit_records``: who put or deleted which window,
when, and its content. ``uns_notifications.held_until`` / ``held_by_window_id``: the
hold a window put on a PENDING notification (NULL on every existing row, so adding
them rewrites nothing), with a partial index (built ``CONCURRENTLY``,
``store.online_ddl``) over the few rows held, by window, which the window's end reads.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from uns_server.store import online_ddl

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
HELD_INDEX = "ix_uns_notifications_held_by_window_id"


def upgrade() -> None:
    op.create_table(
        "uns_maintenance_windows",
        sa.Column("window_id", sa.String(length=64), nullable=False),
        sa.Column("start_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("end_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("notification_types", JSON, nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_by", sa.String(length=255), nullable=False),
        sa.PrimaryKeyConstraint("window_id", name=op.f("pk_uns_maintenance_windows")),
    )
    op.create_index(
        op.f("ix_uns_maintenance_windows_end_time"),
        "uns_maintenance_windows",
        ["end_time"],
    )
    op.create_table(
        "uns_maintenance_audit_records",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("window_id", sa.String(length=64), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("actor", sa.String(length=255), nullable=False),
        sa.Column("content", JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_uns_maintenance_audit_records")),
    )
    op.create_index(
        op.f("ix_uns_maintenance_audit_records_window_id"),
        "uns_maintenance_audit_records",
        ["window_id"],
    )
    op.add_column(
        "uns_notifications", sa.Column("held_until", sa.DateTime(timezone=True), nullable=True)
    )
    op.add_column(
        "uns_notifications", sa.Column("held_by_window_id", sa.String(length=64), nullable=True)
    )
    online_ddl.create_index(
        HELD_INDEX,
        "uns_notifications",
        ["held_by_window_id"],
        where="held_by_window_id IS NOT NULL",
    )


def downgrade() -> None:
    online_ddl.drop_index(HELD_INDEX, "uns_notifications")
    with op.batch_alter_table("uns_notifications") as batch:
        batch.drop_column("held_by_window_id")
        batch.drop_column("held_until")
    op.drop_index(
        op.f("ix_uns_maintenance_audit_records_window_id"),
        table_name="uns_maintenance_audit_records",
    )
    op.drop_table("uns_maintenance_audit_records")
    op.drop_index(op.f("ix_uns_maintenance_windows_end_time"), table_name="uns_maintenance_windows")
    op.drop_table("uns_maintenance_windows")
