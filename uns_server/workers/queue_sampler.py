"""The queue metrics loop: every ``metrics_poll_seconds`` one aggregate query
(``store.queue``) refreshes the numbers the queue gauges report
(``observability.metrics.QueueStats``) — never per call, never per scrape. A failed
query keeps the last sample (the shared loop logs it once per outage); the sampler is
not ``required``: stale gauges do not make the server unhealthy."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from uns_server.observability.metrics import QueueStats
from uns_server.store import events
from uns_server.store.db import Database
from uns_server.store.queue import queue_stats
from uns_server.workers.loop import LoopWorker, Round


class QueueSampler(LoopWorker):
    """Refreshes ``QueueStats`` with one aggregate query every ``poll_seconds``."""

    name = "queue_sampler"
    required = False

    def __init__(
        self,
        db: Database,
        stats: QueueStats,
        clock: Callable[[], datetime],
        poll_seconds: float,
    ) -> None:
        super().__init__(poll_seconds)
        self._db = db
        self._stats = stats
        self._clock = clock

    async def run_once(self) -> Round:
        now = self._clock()
        async with self._db.read() as conn:
            due, leased, scheduled, oldest = await queue_stats(conn, now)
            high_water = await events.high_water(conn)
        s = self._stats
        s.due, s.leased, s.scheduled = due, leased, scheduled
        s.oldest_due_age_seconds = max(0.0, (now - oldest).total_seconds()) if oldest else 0.0
        s.high_water = high_water
        s.sampled = True
        return Round()
