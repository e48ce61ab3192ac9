"""The queue metrics loop: every ``metrics_poll_seconds`` one aggregate query
(``store.queue``) refreshes the numbers the queue gauges report
(``observability.metrics.QueueStats``) — never per call, never per scrape."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime

from uns_server.observability.metrics import QueueStats
from uns_server.store import events
from uns_server.store.db import Database
from uns_server.store.queue import queue_stats

log = logging.getLogger("uns.metrics")


class QueueSampler:
    """Refreshes ``QueueStats`` with one aggregate query every ``poll_seconds``."""

    def __init__(
        self,
        db: Database,
        stats: QueueStats,
        clock: Callable[[], datetime],
        poll_seconds: float,
    ) -> None:
        self._db = db
        self._stats = stats
        self._clock = clock
        self._poll = poll_seconds

    async def run_once(self) -> None:
        now = self._clock()
        async with self._db.read() as conn:
            due, leased, scheduled, oldest = await queue_stats(conn, now)
            high_water = await events.high_water(conn)
        s = self._stats
        s.due, s.leased, s.scheduled = due, leased, scheduled
        s.oldest_due_age_seconds = max(0.0, (now - oldest).total_seconds()) if oldest else 0.0
        s.high_water = high_water
        s.sampled = True

    async def run(self) -> None:
        await sample_forever(
            self.run_once, self._poll, "queue metrics query failed; keeping the last sample"
        )


async def sample_forever(
    run_once: Callable[[], Awaitable[object]], poll_seconds: float, failure: str
) -> None:
    """Run ``run_once`` every ``poll_seconds`` for good. A failed round keeps the last
    sample and logs ``failure`` once per outage, not every poll."""
    failing = False
    while True:
        try:
            await run_once()
            failing = False
        except Exception as exc:
            if not failing:
                log.warning(failure, extra={"error": f"{type(exc).__name__}: {exc}"})
            failing = True
        await asyncio.sleep(poll_seconds)
