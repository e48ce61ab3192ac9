"""A reminder or escalation step retried after a transient failure: its progress

``followup_step`` holds the step being retried between its provider calls (kind,
number, calls made, each channel's latest answer), so a retry calls only the channels
that failed transiently and the step's one event carries every channel's result. NULL
when no step is in progress (every existing row). A nullable column without a default:
no table rewrite on PostgreSQL.

Revision ID: 0011
Revises: 0009
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0011"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    json = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
    with op.batch_alter_table("uns_notifications") as batch:
        batch.add_column(sa.Column("followup_step", json))


def downgrade() -> None:
    with op.batch_alter_table("uns_notifications") as batch:
        batch.drop_column("followup_step")
