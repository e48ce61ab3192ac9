"""operator console: sessions (``uns_console_sessions``), a dead-letter index

Server-side sessions for the browser console, shared by every replica: only the
SHA-256 of the session id is stored, with the session's CSRF token, the hash of the
API key it signed in with, and its idle and absolute expiry.

``ix_uns_notifications_dead_letters``: a partial index on the (few) dead letters, so
the console's "needs action" count and bucket stay cheap however many resolved FAILED
rows accumulate. Built ``CONCURRENTLY`` (``store.online_ddl``): writers go on meanwhile.

(On this branch it follows 0008, the answering migration it was built on; the
integrator re-chains revision ids when merging.)

Revision ID: 0010
Revises: 0008
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from uns_server.store import online_ddl

revision: str = "0010"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


DEAD_LETTERS = "ix_uns_notifications_dead_letters"
DEAD_LETTERS_WHERE = "status = 'FAILED' AND dead_letter"


def upgrade() -> None:
    online_ddl.create_index(
        DEAD_LETTERS, "uns_notifications", ["created_at"], where=DEAD_LETTERS_WHERE
    )
    op.create_table(
        "uns_console_sessions",
        sa.Column("id_hash", sa.String(length=64), nullable=False),
        sa.Column("principal", sa.String(length=255), nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("csrf_token", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id_hash", name=op.f("pk_uns_console_sessions")),
    )
    with op.batch_alter_table("uns_console_sessions", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_uns_console_sessions_expires_at"), ["expires_at"], unique=False
        )


def downgrade() -> None:
    online_ddl.drop_index(DEAD_LETTERS, "uns_notifications")
    with op.batch_alter_table("uns_console_sessions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_uns_console_sessions_expires_at"))
    op.drop_table("uns_console_sessions")
