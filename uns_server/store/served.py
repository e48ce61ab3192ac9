"""The clause "every channel the notification names is among ``:channels``": what a
replica may claim (``store.dispatch``), and its negation, the due work it passes over
(``store.queue.SqlQueue.unserved_due``). One copy of the SQL per dialect."""

from __future__ import annotations

from typing import Any

from sqlalchemy import ARRAY, Text, bindparam, text

POSTGRESQL = "postgresql"

# Another replica with the channel claims what this one passes over (docs/deployment.md,
# channel fingerprints).
_SERVED_PG_SQL = (
    "(notification -> 'effective' -> 'channels') <@ to_jsonb(CAST(:channels AS text[]))"
)
_SERVED_SQLITE_SQL = (
    "NOT EXISTS (SELECT 1 FROM json_each(notification, '$.effective.channels') "
    "WHERE value NOT IN :channels)"
)


def _served_pg(sql: str) -> Any:
    return text(sql).bindparams(bindparam("channels", type_=ARRAY(Text())))


def _served_sqlite(sql: str) -> Any:
    return text(sql).bindparams(bindparam("channels", expanding=True))


def served(dialect: str, *, negated: bool = False) -> Any:
    """The clause: every one of the row's channels is among ``:channels`` (``negated``:
    some channel is not). Built per call: callers on a hot path build theirs once."""
    pg, lite = _SERVED_PG_SQL, _SERVED_SQLITE_SQL
    if negated:
        pg, lite = f"NOT ({pg})", f"NOT ({lite})"
    return _served_pg(pg) if dialect == POSTGRESQL else _served_sqlite(lite)
