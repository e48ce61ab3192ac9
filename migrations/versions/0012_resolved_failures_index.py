"""operator console: indexes for the resolved failures and for listing by type

``ix_uns_notifications_resolved_failures``: a partial index on the FAILED rows that are
not dead letters (resolved by an operator, or failures that never needed action), the
console's *resolved* bucket and count. Through status+created_at the capped count had
to read each FAILED row from the heap to test ``dead_letter`` (20-35 ms at 1,000,000
notifications); on this index it is an index-only scan.

``ix_uns_notifications_type_created_at``: ListNotifications (and the console's list)
filtered by ``notification_type``, newest first. Without it PostgreSQL walks the
created_at index until a page of that type turns up: 50 ms for a type with 1% of the
rows, 600 ms at 1,000,000 notifications for a type with none (a typo). It adds one
index entry per accepted notification.

Both are built ``CONCURRENTLY`` (``store.online_ddl``): writers go on meanwhile.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

from uns_server.store import online_ddl

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

RESOLVED = "ix_uns_notifications_resolved_failures"
RESOLVED_WHERE = "status = 'FAILED' AND NOT dead_letter"


BY_TYPE = "ix_uns_notifications_type_created_at"


def upgrade() -> None:
    online_ddl.create_index(RESOLVED, "uns_notifications", ["created_at"], where=RESOLVED_WHERE)
    online_ddl.create_index(BY_TYPE, "uns_notifications", ["notification_type", "created_at"])


def downgrade() -> None:
    online_ddl.drop_index(BY_TYPE, "uns_notifications")
    online_ddl.drop_index(RESOLVED, "uns_notifications")
