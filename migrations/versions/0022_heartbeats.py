"""heartbeats: ``uns_heartbeats`` (SPEC §7 "Alerts in", ``uns.v1.HeartbeatService``)

A new table only (its deadlines are ``heartbeat_deadline`` rows of ``uns_jobs``, a
kind the previous release never claims): a replica of the previous release during the
rollout neither reads nor writes it. Downgrade drops it.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "uns_heartbeats",
        sa.Column("heartbeat_id", sa.String(length=64), nullable=False),
        sa.Column("notification_type", sa.String(length=255), nullable=False),
        sa.Column("interval_seconds", sa.BigInteger(), nullable=False),
        sa.Column("grace_seconds", sa.BigInteger(), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("armed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_beat_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("paging", sa.Boolean(), nullable=False),
        sa.Column("notification_id", sa.String(length=36), nullable=True),
        sa.Column("page_error", sa.Text(), nullable=False),
        sa.Column("job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_by", sa.String(length=255), nullable=False),
        sa.PrimaryKeyConstraint("heartbeat_id", name=op.f("pk_uns_heartbeats")),
    )


def downgrade() -> None:
    op.drop_table("uns_heartbeats")
