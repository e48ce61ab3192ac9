"""Maintenance windows' ends, and this process's windows in memory.

Each round reloads the windows when a change was signalled (``TOPIC_MAINTENANCE``,
here or by NOTIFY from another process) or every ``services.maintenance.
REFRESH_SECONDS``, then, in one transaction, claims the due ``window_end`` jobs, reads
each job's window and, once it is gone or has ended (``domain.maintenance.releases``),
releases what it held (due now, the hold cleared), then completes the jobs in one
fenced settle. A job whose window was moved later does nothing: the put that moved it
inserted the later one. Between rounds it sleeps until the next job or reload is due.

Not ``required``: held work is due at its window's end anyway (its ``next_attempt``),
and the claim holds nothing once the window has ended; a failed round only leaves the
hold shown on the rows a little longer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from uns_server.domain import maintenance
from uns_server.services.maintenance import Windows
from uns_server.store.port import TOPIC_WORK, Store
from uns_server.workers.loop import LoopWorker, seconds_until

log = logging.getLogger("uns.maintenance")
BATCH = 100
# Claimed and settled in one transaction: its lease never outlives it.
END_LEASE = timedelta(minutes=5)


@dataclass(frozen=True)
class Released:
    ended: int  # window_end jobs that released their window's work
    released: int  # notifications released by them
    more: bool = False
    due_in: float | None = None


class MaintenanceWorker(LoopWorker):
    name = "maintenance"
    required = False

    def __init__(
        self,
        store: Store,
        windows: Windows,
        clock: Callable[[], datetime],
        poll_seconds: float,
    ) -> None:
        super().__init__(poll_seconds)
        self._store = store
        self._windows = windows
        self._clock = clock
        windows.on_change(self.wake)

    async def run_once(self) -> Released:
        if self._windows.stale:
            await self._windows.refresh()
        now = self._clock()
        ended = released = 0
        async with self._store.write() as tx:
            jobs = await tx.jobs.claim(
                [maintenance.END_KIND], now=now, limit=BATCH, lease=END_LEASE
            )
            for job in jobs:
                window_id = maintenance.window_of(job)
                window = await tx.maintenance.get(window_id)
                if window_id and maintenance.releases(window, now):
                    ended += 1
                    released += await tx.maintenance.retime_held(window_id, until=None, now=now)
            if jobs:
                await tx.jobs.settle_many([maintenance.end_done(j) for j in jobs], now)
            if released:
                tx.signal(TOPIC_WORK)
        if released:
            log.info("maintenance window ended", extra={"released": released})
        if len(jobs) == BATCH:
            return Released(ended, released, more=True)
        async with self._store.read() as tx:
            due = await tx.jobs.next_due_at([maintenance.END_KIND])
        wait = seconds_until(due, self._clock())
        refresh = self._windows.refresh_in()
        return Released(ended, released, due_in=refresh if wait is None else min(wait, refresh))
