"""snooze reminders: ``uns_notifications.snoozes_ended`` (SPEC §7 "Quiet on purpose")

At a snooze's end the person is asked again: a reminder numbered by the snoozes ended
so far, so each snooze's reminder has its own step progress, provider references and
idempotency token. One column with a server default (0): a replica of the previous
release that inserts notifications without it still works during the rollout (it
ends snoozes without a reminder, as it did), and PostgreSQL adds it without rewriting
the table. Downgrade drops it.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "uns_notifications",
        sa.Column("snoozes_ended", sa.Integer(), nullable=False, server_default="0"),
    )


def downgrade() -> None:
    with op.batch_alter_table("uns_notifications") as batch:
        batch.drop_column("snoozes_ended")
