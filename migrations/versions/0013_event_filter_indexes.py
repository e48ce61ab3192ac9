"""WatchEvents catch-up: indexes for the principal and notification_type filters

``ix_uns_events_principal_sequence``: a producer's WatchEvents (or a resume after a
cursor) reads ``principal IN (...) AND sequence > N ORDER BY sequence LIMIT k``.
Through the sequence primary key alone that walks every later event of every other
tenant until a page of the caller's turns up: the whole table when the caller has few
events. On this index it reads only the caller's own events.

``ix_uns_events_type_sequence``: the same for the ``notification_type`` filter.

Each adds one index entry per event. Both are built ``CONCURRENTLY``
(``store.online_ddl``): writers go on meanwhile.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

from uns_server.store import online_ddl

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BY_PRINCIPAL = "ix_uns_events_principal_sequence"
BY_TYPE = "ix_uns_events_type_sequence"


def upgrade() -> None:
    online_ddl.create_index(BY_PRINCIPAL, "uns_events", ["principal", "sequence"])
    online_ddl.create_index(BY_TYPE, "uns_events", ["notification_type", "sequence"])


def downgrade() -> None:
    online_ddl.drop_index(BY_TYPE, "uns_events")
    online_ddl.drop_index(BY_PRINCIPAL, "uns_events")
