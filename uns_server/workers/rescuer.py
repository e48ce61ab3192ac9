"""The work table's one rescuer (River's ``JobRescuer``): leases that expired without a
settle (a worker that died, hung or lost its database mid-attempt) go back to
retryable, due at once, or are discarded when that was their last attempt
(``domain.jobs.rescued``): one fenced UPDATE for every kind (``Jobs.rescue_expired``).

The kinds' workers only claim and settle; none rescues. Between rounds the rescuer
sleeps until the next lease expires, at most its poll interval (a lease taken after
it fell asleep is found by the next poll). Rescued rows are due at once: the workers
of their kinds in this process are woken (``on_rescued``); another process's find them
at their next poll.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime

from uns_server.domain.jobs import JobKind, JobState
from uns_server.store.port import Store
from uns_server.workers.loop import LoopWorker, seconds_until
from uns_server.workers.supervision import Supervision

log = logging.getLogger("uns.rescuer")
BATCH = 500
KINDS = frozenset(JobKind)


@dataclass(frozen=True)
class Rescued:
    retried: int  # rows back to retryable, due now
    discarded: int  # rows whose lost attempt was their last
    more: bool = False  # a full batch: look again at once
    due_in: float | None = None  # until the next lease expires


class JobRescuer(LoopWorker):
    name = "rescuer"  # repeated faults turn health NOT_SERVING: lost work would wait

    def __init__(
        self,
        store: Store,
        clock: Callable[[], datetime],
        poll_seconds: float,
        supervision: Supervision | None = None,
        *,
        batch: int = BATCH,
    ) -> None:
        super().__init__(poll_seconds, supervision)
        self._store = store
        self._clock = clock
        self._batch = batch
        self._wakers: dict[JobKind, list[Callable[[], None]]] = defaultdict(list)

    def on_rescued(self, kinds: Collection[JobKind], wake: Callable[[], None]) -> None:
        """Call ``wake`` when a round makes rows of ``kinds`` due again."""
        for kind in kinds:
            self._wakers[kind].append(wake)

    async def run_once(self) -> Rescued:
        now = self._clock()
        async with self._store.write() as tx:
            rescued = await tx.jobs.rescue_expired(KINDS, now=now, limit=self._batch)
        retried = [j for j in rescued if j.state is JobState.RETRYABLE]
        for job in rescued:
            if job.state is JobState.DISCARDED:
                log.warning(
                    "job given up: its last attempt's lease expired",
                    extra={"kind": job.kind.value, "notification_id": job.notification_id},
                )
        for wake in {w for job in retried for w in self._wakers.get(job.kind, ())}:
            wake()
        if rescued:
            by_kind = Counter(f"{j.kind.value}.{j.state.value}" for j in rescued)
            log.info("expired leases rescued", extra=dict(by_kind))
        counts = (len(retried), len(rescued) - len(retried))
        if len(rescued) == self._batch:
            return Rescued(*counts, more=True)
        async with self._store.read() as tx:
            expiry = await tx.jobs.next_rescue_at(KINDS)
        return Rescued(*counts, due_in=seconds_until(expiry, self._clock()))
