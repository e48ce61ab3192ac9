"""a person's language: ``uns_recipients.locale`` (BCP 47, SPEC §7 templates)

One column with a server default (""), so a replica of the previous release that
inserts people without it still works during the rollout, and PostgreSQL adds it
without rewriting the table. Downgrade drops it.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "uns_recipients",
        sa.Column("locale", sa.String(35), nullable=False, server_default=""),
    )


def downgrade() -> None:
    with op.batch_alter_table("uns_recipients") as batch:
        batch.drop_column("locale")
