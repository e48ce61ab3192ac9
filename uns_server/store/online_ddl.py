"""Index changes a migration can make while the service runs (used by ``migrations/``).

On PostgreSQL a plain ``CREATE INDEX`` holds off every write to the table for the whole
build, and ``DROP INDEX`` every read too, until the migration's transaction commits.
So indexes are built and dropped ``CONCURRENTLY``, outside the migration's transaction
(Alembic's autocommit block): writers go on meanwhile. Each step is idempotent, so a
migration interrupted anywhere (a killed replica, a cancelled statement) finishes when
it runs again:

* a new definition is built under a temporary name; an invalid index that a failed
  concurrent build left there is dropped first (``IF NOT EXISTS`` alone would keep it),
  and so is a valid one while the old index still exists (it may be another
  definition's);
* the old index is dropped (``IF EXISTS``) only once the new one is valid, and the new
  one renamed into place (a rename takes no lock that blocks reads or writes), so the
  queries it serves always have one of the two.

SQLite keeps the plain statements: its writers are serialised anyway, and it has no
concurrent builds.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

TEMPORARY_SUFFIX = "_new"


def replace_index(
    name: str, table: str, columns: Sequence[str], *, where: str | None = None
) -> None:
    """Make ``name`` the index of ``table`` on ``columns`` (SQL, e.g. ``"priority DESC"``),
    partial on ``where``, whatever index of that name was there before."""
    context = op.get_context()
    if context.dialect.name != "postgresql":
        op.drop_index(name, table_name=table, if_exists=True)
        predicate = sa.text(where) if where else None
        op.create_index(
            name, table, [sa.text(c) for c in columns], sqlite_where=predicate, if_not_exists=True
        )
        return
    temporary = name + TEMPORARY_SUFFIX
    with context.autocommit_block():
        # A script for later (``alembic upgrade --sql``) cannot read the catalog.
        if context.as_sql or _stale(temporary, name):
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {temporary}")
        partial = f" WHERE {where}" if where else ""
        op.execute(
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {temporary}"
            f" ON {table} ({', '.join(columns)}){partial}"
        )
        op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
        op.execute(f"ALTER INDEX IF EXISTS {temporary} RENAME TO {name}")


def _stale(temporary: str, name: str) -> bool:
    """Must an index left under the temporary name be dropped before building? Yes when
    a failed concurrent build left it invalid; also when the old index still exists
    beside it, since it may then come from another definition (an interrupted downgrade,
    say): rebuilding costs one more build, keeping it could install the wrong one. Only
    once the old index is gone is it certainly this run's own, waiting to be renamed."""
    row = (
        op.get_bind()
        .execute(
            sa.text(
                "SELECT i.indisvalid, to_regclass(:name) IS NOT NULL AS old_exists"
                " FROM pg_index i WHERE i.indexrelid = to_regclass(:temporary)"
            ),
            {"temporary": temporary, "name": name},
        )
        .first()
    )
    return row is not None and (not row.indisvalid or row.old_exists)


def create_index(
    name: str, table: str, columns: Sequence[str], *, where: str | None = None
) -> None:
    """Add an index (expand) without holding off writers: ``replace_index`` with
    nothing to replace."""
    replace_index(name, table, columns, where=where)


def drop_index(name: str, table: str) -> None:
    """Drop an index (contract) without holding off readers or writers."""
    context = op.get_context()
    if context.dialect.name != "postgresql":
        op.drop_index(name, table_name=table, if_exists=True)
        return
    with context.autocommit_block():
        op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
