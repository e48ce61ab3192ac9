"""Retention of the work table (River's job cleaner): every ``POLL_SECONDS`` delete
final jobs (``Jobs.delete_finished_before`` of the store port) once they are old:
completed and cancelled ones after ``KEEP_DONE``, discarded ones (the work that was
given up, worth reading when asking why) after ``KEEP_DISCARDED``. Rows still to be
worked (available, running, retryable) are never deleted.

What a job did stays in the notification's events; the row itself is bookkeeping. Not
``required``: a failed round leaves the rows for the next one, and the server serves
meanwhile. A full batch runs again at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from uns_server.domain.jobs import JobState
from uns_server.store.port import Store
from uns_server.workers.loop import LoopWorker

log = logging.getLogger("uns.retention")
KEEP_DONE = timedelta(days=1)
KEEP_DISCARDED = timedelta(days=7)
POLL_SECONDS = 600.0
BATCH = 1000


@dataclass(frozen=True)
class Cleaned:
    deleted: int
    more: bool = False
    due_in: float | None = None


class JobCleaner(LoopWorker):
    name = "job_cleaner"
    required = False

    def __init__(
        self,
        store: Store,
        clock: Callable[[], datetime],
        *,
        poll_seconds: float = POLL_SECONDS,
        batch: int = BATCH,
    ) -> None:
        super().__init__(poll_seconds)
        self._store = store
        self._clock = clock
        self._batch = batch

    async def run_once(self) -> Cleaned:
        now = self._clock()
        async with self._store.write() as tx:
            done = await tx.jobs.delete_finished_before(
                now - KEEP_DONE,
                limit=self._batch,
                states=(JobState.COMPLETED, JobState.CANCELLED),
            )
            discarded = await tx.jobs.delete_finished_before(
                now - KEEP_DISCARDED, limit=self._batch, states=(JobState.DISCARDED,)
            )
        if done or discarded:
            log.info("final jobs deleted", extra={"count": done + discarded})
        return Cleaned(done + discarded, more=self._batch in (done, discarded))
