"""dedup owner/successor indexes only over the rows that have one

Most notifications are in no dedup window, so both columns are NULL in most rows;
indexing those NULLs cost two index entries per insert, and two more per update of
a row (settling changes ``status``, which other indexes hold, so no update is HOT).
Every query on these columns compares them with values (``=``, ``IN``), which both
PostgreSQL and SQLite prove imply ``IS NOT NULL``: the partial indexes serve them.
Rebuilding them reads the table once and holds off writes meanwhile (seconds per
million rows): upgrade in a quiet moment.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS = ("dedup_owner_id", "dedup_successor_id")


def _recreate(*, partial: bool) -> None:
    for column in _COLUMNS:
        name = f"ix_uns_notifications_{column}"
        where = sa.text(f"{column} IS NOT NULL") if partial else None
        op.drop_index(name, table_name="uns_notifications")
        op.create_index(
            name, "uns_notifications", [column], postgresql_where=where, sqlite_where=where
        )


def upgrade() -> None:
    _recreate(partial=True)


def downgrade() -> None:
    _recreate(partial=False)
