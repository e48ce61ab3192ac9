"""uns_maintenance: the WatchEvents history horizon left by retention

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Written by hand; identical on SQLite and PostgreSQL (BIGINT on both: this is
    # not an autoincrement key, so SQLite's INTEGER PRIMARY KEY rule does not apply).
    op.create_table(
        "uns_maintenance",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("compacted_sequence", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_uns_maintenance")),
    )


def downgrade() -> None:
    op.drop_table("uns_maintenance")
