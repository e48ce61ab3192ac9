"""people answer from messages: provider references, ack channel, message-update outbox

- ``uns_notifications.provider_refs``: per channel, what the provider handed back for
  the latest accepted message (Slack channel + ts, SMTP Message-ID, PagerDuty
  dedup_key, webhook-id), so the message can be updated when the obligation ends.
- ``ack_audit_records.via``: the channel an answer came from (grpc, link, slack, ...).
- ``uns_message_updates``: durable follow-up work (Slack chat.update, PagerDuty
  acknowledge/resolve) claimed with a lease and a fencing token, retried.
- ``uns_revoked_links``: SHA-256 of revoked action-link tokens (never the tokens).
- ``uns_callback_receipts``: digests of accepted provider callbacks (replay refusal).

Adding nullable columns and new tables takes no table rewrite on either dialect.

Revision ID: 0008
Revises: 0004
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0008"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _json() -> Any:
    return sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("uns_notifications", schema=None) as batch_op:
        batch_op.add_column(sa.Column("provider_refs", _json(), nullable=True))
    with op.batch_alter_table("ack_audit_records", schema=None) as batch_op:
        batch_op.add_column(sa.Column("via", sa.String(length=64), nullable=True))
    op.create_table(
        "uns_message_updates",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("notification_id", sa.String(length=36), nullable=False),
        sa.Column("channel", sa.String(length=64), nullable=False),
        sa.Column("reference", _json(), nullable=False),
        sa.Column("outcome", _json(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt", sa.DateTime(timezone=True), nullable=False),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("lease_token", sa.String(length=36), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_uns_message_updates")),
    )
    with op.batch_alter_table("uns_message_updates", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_uns_message_updates_notification_id"), ["notification_id"]
        )
        batch_op.create_index(
            "ix_uns_message_updates_due",
            ["next_attempt"],
            postgresql_where=sa.text("status = 'PENDING'"),
            sqlite_where=sa.text("status = 'PENDING'"),
        )
    op.create_table(
        "uns_revoked_links",
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("notification_id", sa.String(length=36), nullable=False),
        sa.Column("revoked_by", sa.String(length=255), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("token_hash", name=op.f("pk_uns_revoked_links")),
    )
    op.create_table(
        "uns_callback_receipts",
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("provider", sa.String(length=32), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("digest", name=op.f("pk_uns_callback_receipts")),
    )
    with op.batch_alter_table("uns_callback_receipts", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_uns_callback_receipts_received_at"), ["received_at"])


def downgrade() -> None:
    op.drop_table("uns_callback_receipts")
    op.drop_table("uns_revoked_links")
    with op.batch_alter_table("uns_message_updates", schema=None) as batch_op:
        batch_op.drop_index("ix_uns_message_updates_due")
        batch_op.drop_index(batch_op.f("ix_uns_message_updates_notification_id"))
    op.drop_table("uns_message_updates")
    with op.batch_alter_table("ack_audit_records", schema=None) as batch_op:
        batch_op.drop_column("via")
    with op.batch_alter_table("uns_notifications", schema=None) as batch_op:
        batch_op.drop_column("provider_refs")
