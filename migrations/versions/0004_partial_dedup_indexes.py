"""dedup owner/successor indexes only over the rows that have one

Most notifications are in no dedup window, so both columns are NULL in most rows;
indexing those NULLs cost two index entries per insert, and two more per update of
a row (settling changes ``status``, which other indexes hold, so no update is HOT).
Every query on these columns compares them with values (``=``, ``IN``), which both
PostgreSQL and SQLite prove imply ``IS NOT NULL``: the partial indexes serve them.
On PostgreSQL they are rebuilt concurrently (``uns_server.store.online_ddl``): the
build reads the table twice (seconds per million rows) while writes go on; rerunning
after an interruption finishes it.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

from uns_server.store.online_ddl import replace_index

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS = ("dedup_owner_id", "dedup_successor_id")


def _recreate(*, partial: bool) -> None:
    for column in _COLUMNS:
        replace_index(
            f"ix_uns_notifications_{column}",
            "uns_notifications",
            [column],
            where=f"{column} IS NOT NULL" if partial else None,
        )


def upgrade() -> None:
    _recreate(partial=True)


def downgrade() -> None:
    _recreate(partial=False)
