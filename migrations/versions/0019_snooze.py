"""snooze: ``uns_notifications.snoozed_until`` and ``snoozed_seconds`` (SPEC §7)

A snoozed acknowledgement (ack state SNOOZED, ``domain.snooze``) keeps when its snooze
ends and the pauses so far (the shift of its reminders and escalation steps). Two
columns with server defaults (NULL, 0): a replica of the previous release that inserts
notifications without them still works during the rollout, and PostgreSQL adds them
without rewriting the table. Downgrade drops them (a snoozed ack is then PENDING).

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("uns_notifications", sa.Column("snoozed_until", sa.DateTime(timezone=True)))
    op.add_column(
        "uns_notifications",
        sa.Column("snoozed_seconds", sa.Integer(), nullable=False, server_default="0"),
    )


def downgrade() -> None:
    op.execute(
        sa.text("UPDATE uns_notifications SET ack_status = 'PENDING' WHERE ack_status = 'SNOOZED'")
    )
    with op.batch_alter_table("uns_notifications") as batch:
        batch.drop_column("snoozed_seconds")
        batch.drop_column("snoozed_until")
