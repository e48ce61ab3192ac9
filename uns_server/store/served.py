"""The clause "every channel the notification names is among ``:channels``": what a
replica may claim, and its negation, the due work it passes over
(``store.queue.SqlQueue.unserved_due``). One copy of the SQL per dialect, on the
notification's document or (``served_job``) on the copy of its channels a delivery
job carries (``args.channels``), which the claim reads without the notification."""

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

# A delivery job's copy (``store.deliveries``): a job without one is served nowhere.
_JOB_PG_SQL = "(uns_jobs.args -> 'channels') <@ to_jsonb(CAST(:channels AS text[]))"
_JOB_SQLITE_SQL = (
    "json_type(uns_jobs.args, '$.channels') = 'array' AND NOT EXISTS (SELECT 1 FROM "
    "json_each(uns_jobs.args, '$.channels') WHERE value NOT IN :channels)"
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


def served_job(dialect: str) -> Any:
    """The clause on ``uns_jobs``: every channel of the delivery job's notification
    (its ``args.channels``) is among ``:channels``."""
    return _served_pg(_JOB_PG_SQL) if dialect == POSTGRESQL else _served_sqlite(_JOB_SQLITE_SQL)
