"""uns_api_keys.responds_for: the tenants a responder key answers for (SPEC §3)

Existing keys answer for no other principal (``[]``), which is the tenancy rule for
every key from now on: a responder that acknowledged across tenants before needs a
new key with ``responds_for``, or the operator role. Adding a column with a constant
default changes only the catalog on PostgreSQL 11+ (no table rewrite, a brief lock).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("uns_api_keys") as batch:
        batch.add_column(
            sa.Column("responds_for", _JSON, nullable=False, server_default=sa.text("'[]'"))
        )


def downgrade() -> None:
    with op.batch_alter_table("uns_api_keys") as batch:
        batch.drop_column("responds_for")
