"""The queue metrics loop: every ``metrics_poll_seconds`` one aggregate query
(``Queue.backlog`` of the store port) refreshes the numbers the queue gauges report
(``observability.metrics.QueueStats``) — never per call, never per scrape. A failed
query keeps the last sample (the shared loop logs it once per outage); the sampler is
not ``required``: stale gauges do not make the server unhealthy."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from uns_server.observability.metrics import QueueStats
from uns_server.store.port import Store
from uns_server.workers.loop import LoopWorker, Round


class QueueSampler(LoopWorker):
    """Refreshes ``QueueStats`` with one aggregate query every ``poll_seconds``."""

    name = "queue_sampler"
    required = False

    def __init__(
        self,
        store: Store,
        stats: QueueStats,
        clock: Callable[[], datetime],
        poll_seconds: float,
    ) -> None:
        super().__init__(poll_seconds)
        self._store = store
        self._stats = stats
        self._clock = clock

    async def run_once(self) -> Round:
        now = self._clock()
        async with self._store.read() as tx:
            backlog = await tx.queue.backlog(now)
            high_water = await tx.events.high_water()
        s = self._stats
        s.due, s.leased, s.scheduled = backlog.due, backlog.leased, backlog.scheduled
        oldest = backlog.oldest_due
        s.oldest_due_age_seconds = max(0.0, (now - oldest).total_seconds()) if oldest else 0.0
        s.high_water = high_water
        s.sampled = True
        return Round()
