"""people and on-call: recipients, rotations, their references and audit records

``uns_recipients``: one row per person (SPEC §6), contacts and quiet hours as JSON.
``uns_rotations``: one row per on-call rotation, members and overrides as JSON.
``uns_rotation_refs``: every recipient a rotation names, with a foreign key to the
person, so deleting a person still referenced fails in the database itself
(RECIPIENT_IN_USE), whatever runs concurrently. ``uns_people_audit_records``: who
put or deleted which person or rotation, when, and the content.

New tables only: nothing existing is rewritten or locked.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
JSON_OR_NULL = sa.JSON(none_as_null=True).with_variant(
    postgresql.JSONB(none_as_null=True), "postgresql"
)


def _times() -> list[sa.Column[object]]:
    return [
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_by", sa.String(length=255), nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "uns_recipients",
        sa.Column("recipient_id", sa.String(length=64), nullable=False),
        sa.Column("display_name", sa.String(length=255), nullable=False),
        sa.Column("time_zone", sa.String(length=64), nullable=False),
        sa.Column("contacts", JSON, nullable=False),
        sa.Column("quiet_hours", JSON_OR_NULL, nullable=True),
        *_times(),
        sa.PrimaryKeyConstraint("recipient_id", name=op.f("pk_uns_recipients")),
    )
    op.create_table(
        "uns_rotations",
        sa.Column("rotation_id", sa.String(length=64), nullable=False),
        sa.Column("members", JSON, nullable=False),
        sa.Column("start_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("shift_seconds", sa.BigInteger(), nullable=False),
        sa.Column("time_zone", sa.String(length=64), nullable=False),
        sa.Column("overrides", JSON, nullable=False),
        *_times(),
        sa.PrimaryKeyConstraint("rotation_id", name=op.f("pk_uns_rotations")),
    )
    op.create_table(
        "uns_rotation_refs",
        sa.Column("rotation_id", sa.String(length=64), nullable=False),
        sa.Column("recipient_id", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ["recipient_id"],
            ["uns_recipients.recipient_id"],
            name=op.f("fk_uns_rotation_refs_recipient_id_uns_recipients"),
        ),
        sa.ForeignKeyConstraint(
            ["rotation_id"],
            ["uns_rotations.rotation_id"],
            name=op.f("fk_uns_rotation_refs_rotation_id_uns_rotations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("rotation_id", "recipient_id", name=op.f("pk_uns_rotation_refs")),
    )
    op.create_index(
        op.f("ix_uns_rotation_refs_recipient_id"),
        "uns_rotation_refs",
        ["recipient_id"],
        unique=False,
    )
    op.create_table(
        "uns_people_audit_records",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("object_id", sa.String(length=64), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("actor", sa.String(length=255), nullable=False),
        sa.Column("content", JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_uns_people_audit_records")),
    )
    op.create_index(
        op.f("ix_uns_people_audit_records_created_at"),
        "uns_people_audit_records",
        ["created_at"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index(
        op.f("ix_uns_people_audit_records_created_at"), table_name="uns_people_audit_records"
    )
    op.drop_table("uns_people_audit_records")
    op.drop_index(op.f("ix_uns_rotation_refs_recipient_id"), table_name="uns_rotation_refs")
    op.drop_table("uns_rotation_refs")
    op.drop_table("uns_rotations")
    op.drop_table("uns_recipients")
