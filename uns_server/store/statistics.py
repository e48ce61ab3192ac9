"""The planner statistics port (``store.port.PlannerStatistics``) of a new PostgreSQL
database.

A new table has none until autovacuum's first ``ANALYZE``, up to ``autovacuum_naptime``
(a minute) after the first writes. Meanwhile every pooled connection keeps the plans
it cached while the table was nearly empty: the idempotency-key lookup
(``key = ANY($1)``) stays a sequential scan, which costs milliseconds per accept once
a few thousand rows exist (docs/PERFORMANCE.md). ``ANALYZE`` gives the planner real
figures and makes every connection plan its cached statements again.
"""

from __future__ import annotations

from sqlalchemy import text

from uns_server.store.bound import Bound
from uns_server.store.port.values import Statistics

# The tables the hot path looks rows up in; the first one decides when. The delivery
# claim joins ``uns_jobs`` to ``uns_notifications``: without figures for the jobs, the
# planner walked the due-leaders index once per job (a claim slower with every
# delivery of a fresh backlog).
HOT_TABLES = ("uns_notifications", "uns_events", "uns_jobs")


class SqlPlannerStatistics(Bound):
    __slots__ = ()

    async def state(self, min_rows: int) -> Statistics:
        analyzed = (
            await self._conn.execute(
                text(
                    "SELECT last_analyze IS NOT NULL OR last_autoanalyze IS NOT NULL"
                    " FROM pg_stat_user_tables WHERE relname = :table"
                ),
                {"table": HOT_TABLES[0]},
            )
        ).scalar()
        if analyzed:
            return Statistics.ANALYZED
        # Exact and bounded: stops counting at min_rows (pg_stat's n_live_tup lags).
        rows = (
            await self._conn.execute(
                text(f"SELECT count(*) FROM (SELECT 1 FROM {HOT_TABLES[0]} LIMIT :n) AS s"),
                {"n": min_rows},
            )
        ).scalar_one()
        return Statistics.MISSING if rows >= min_rows else Statistics.TOO_FEW_ROWS

    async def analyze(self) -> None:
        """Without ownership of a table, PostgreSQL skips it with a warning, not an error."""
        await self._conn.execute(text(f"ANALYZE {', '.join(HOT_TABLES)}"))
