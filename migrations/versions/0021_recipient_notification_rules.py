"""a person's staged rules: ``uns_recipients.notification_rules`` (SPEC §7)

One nullable JSON column (NULL: no rules, every contact at once, as before), so a
replica of the previous release that inserts people without it still works during
the rollout, and PostgreSQL adds it without rewriting the table. Downgrade drops it.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

# As ``store.tables.JsonOrNull``: JSONB on PostgreSQL, a NULL column (not JSON null).
JSON_OR_NULL = sa.JSON(none_as_null=True).with_variant(
    postgresql.JSONB(none_as_null=True), "postgresql"
)

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("uns_recipients", sa.Column("notification_rules", JSON_OR_NULL, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("uns_recipients") as batch:
        batch.drop_column("notification_rules")
