"""Withdrawal and follow-ups (reminders, escalation steps) on uns_notifications

``withdrawn_at`` / ``withdrawn_by`` / ``withdraw_reason`` record WithdrawNotification.
``followup_at`` is when the follow-up worker next looks at a row (NULL: nothing to
follow up, which is every existing row), fenced by its own lease
(``followup_lease_token`` / ``followup_lease_until``) so a reminder or step is decided
once across replicas; ``reminders_sent`` / ``escalations_sent`` count what was sent.
Nullable columns and constant defaults: no table rewrite on PostgreSQL 11+; the
index is built concurrently (``store.online_ddl``), so writers are never held off.

Revision ID: 0009
Revises: 0010
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from uns_server.store import online_ddl

revision: str = "0009"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_INDEX = "ix_uns_notifications_followup_at"


def upgrade() -> None:
    with op.batch_alter_table("uns_notifications") as batch:
        batch.add_column(sa.Column("withdrawn_at", sa.DateTime(timezone=True)))
        batch.add_column(sa.Column("withdrawn_by", sa.String(255)))
        batch.add_column(sa.Column("withdraw_reason", sa.Text()))
        batch.add_column(sa.Column("followup_at", sa.DateTime(timezone=True)))
        batch.add_column(sa.Column("followup_lease_token", sa.String(36)))
        batch.add_column(sa.Column("followup_lease_until", sa.DateTime(timezone=True)))
        batch.add_column(
            sa.Column("reminders_sent", sa.Integer(), nullable=False, server_default=sa.text("0"))
        )
        batch.add_column(
            sa.Column("escalations_sent", sa.Integer(), nullable=False, server_default=sa.text("0"))
        )
    online_ddl.create_index(
        _INDEX, "uns_notifications", ["followup_at"], where="followup_at IS NOT NULL"
    )


def downgrade() -> None:
    online_ddl.drop_index(_INDEX, "uns_notifications")
    with op.batch_alter_table("uns_notifications") as batch:
        for column in (
            "escalations_sent",
            "reminders_sent",
            "followup_lease_until",
            "followup_lease_token",
            "followup_at",
            "withdraw_reason",
            "withdrawn_by",
            "withdrawn_at",
        ):
            batch.drop_column(column)
