"""Analyze a new PostgreSQL database's hot tables once they hold enough rows to matter.

Until then autovacuum would, within a minute; this shortens that minute to a poll
(``store/statistics.py`` says why it matters). The task ends once the table has been
analyzed by anyone, so on an established database it costs one query at start-up.
"""

from __future__ import annotations

import asyncio
import logging

from uns_server.store.port import Statistics, Store

log = logging.getLogger("uns.statistics")
MIN_ROWS = 1_000
POLL_SECONDS = 2.0


class FirstAnalyze:
    def __init__(
        self, store: Store, min_rows: int = MIN_ROWS, poll_seconds: float = POLL_SECONDS
    ) -> None:
        self._store = store
        self._min_rows = min_rows
        self._poll = poll_seconds

    async def run_once(self) -> Statistics:
        """The state found; ``MISSING`` means this call analyzed the tables."""
        async with self._store.read() as tx:
            found = await tx.statistics.state(self._min_rows)
            if found is Statistics.MISSING:
                await tx.statistics.analyze()
        return found

    async def run(self) -> None:
        while True:
            try:
                found = await self.run_once()
            except Exception as exc:
                # Only a shortcut, not worth a retry loop: autovacuum gets there anyway.
                log.warning("first ANALYZE skipped: %s: %s", type(exc).__name__, exc)
                return
            if found is Statistics.MISSING:
                log.info("analyzed the new database's hot tables")
            if found is not Statistics.TOO_FEW_ROWS:
                return
            await asyncio.sleep(self._poll)
