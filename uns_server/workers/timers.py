"""The timers: every kind of job whose whole work is a decision and a write, with no
provider call (``domain.jobs.TIMER_KINDS``: ack deadlines, snooze ends, heartbeat
deadlines, maintenance windows' ends), fired by one worker in one claim.

A round is one transaction: one claim of the due jobs of every timer kind (earliest
first), each kind's jobs fired by its service in a fixed order (snooze ends before
ack deadlines: an ended snooze moved its deadline later), then one fenced settle
completing them all. A stale job (the thing it served changed) completes doing
nothing. Since the claim never commits without its settle, a timer's lease never
outlives its transaction and the rescuer never sees one. With room left, the carry
sweep times out PENDING acks past their deadline that no job did (those opened by a
replica of the previous release; removed with it by a later contract step).

Between rounds the worker sleeps until the next timer falls due, at most its poll
interval (which also bounds how late the carry sweep runs), or until a wake-up: a put
or a beat that armed a heartbeat's deadline, a window changed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta

from uns_server.domain.jobs import TIMER_KINDS, JobKind, completed
from uns_server.domain.moves import MoveLost
from uns_server.domain.records import Job
from uns_server.services.acks import AckService
from uns_server.services.heartbeat_deadlines import HeartbeatDeadlines
from uns_server.services.heartbeats import TOPIC_HEARTBEATS
from uns_server.services.maintenance import end_windows
from uns_server.services.snooze import Snoozes
from uns_server.store.port import Store
from uns_server.workers.loop import LoopWorker, seconds_until
from uns_server.workers.supervision import Supervision

log = logging.getLogger("uns.timers")
BATCH = 500
# Claimed and settled in one transaction: the lease never outlives it.
LEASE = timedelta(minutes=5)


@dataclass(frozen=True)
class Fired:
    timed_out: int = 0  # acks timed out (by their jobs, or the carry sweep)
    snoozes_ended: int = 0
    paged: int = 0  # heartbeats that went silent and paged
    released: int = 0  # notifications released by maintenance windows that ended
    more: bool = False  # a full batch: look again at once
    due_in: float | None = None  # until the next timer falls due


class TimerWorker(LoopWorker):
    name = "timers"  # repeated faults turn health NOT_SERVING

    def __init__(
        self,
        store: Store,
        clock: Callable[[], datetime],
        poll_seconds: float,
        supervision: Supervision | None = None,
        *,
        acks: AckService,
        snoozes: Snoozes,
        heartbeats: HeartbeatDeadlines,
        batch: int = BATCH,
    ) -> None:
        super().__init__(poll_seconds, supervision)
        self._store = store
        self._clock = clock
        self._acks = acks
        self._snoozes = snoozes
        self._heartbeats = heartbeats
        self._batch = batch
        store.on_commit(TOPIC_HEARTBEATS, self.wake)  # a put or a beat armed a deadline

    async def run_once(self) -> Fired:
        now = self._clock()
        async with self._store.write() as tx:
            jobs = await tx.jobs.claim(TIMER_KINDS, now=now, limit=self._batch, lease=LEASE)
            of: dict[JobKind, list[Job]] = {}
            for job in jobs:
                of.setdefault(job.kind, []).append(job)
            ended = await self._snoozes.fire_ends(tx, of.get(JobKind.SNOOZE_END, []), now)
            timed_out = await self._acks.fire_deadlines(tx, of.get(JobKind.ACK_DEADLINE, []), now)
            pages = await self._heartbeats.fire(tx, of.get(JobKind.HEARTBEAT_DEADLINE, []), now)
            released = await end_windows(tx, of.get(JobKind.WINDOW_END, []), now)
            landed = await tx.jobs.settle_many([completed(job) for job in jobs], now)
            if len(landed) != len(jobs):  # claimed in this transaction: a bug
                raise MoveLost(f"timers: {len(landed)} of {len(jobs)} jobs settled")
            room = self._batch - len(jobs)
            carried = await self._acks.carry_deadlines(tx, now, room) if room > 0 else 0
        fired = Fired(timed_out + carried, ended, pages.paged, released)
        if fired != Fired():
            log.info("timers fired", extra=asdict(fired))
        if len(jobs) + carried >= self._batch:
            return replace(fired, more=True)
        async with self._store.read() as tx:
            due = await tx.jobs.next_due_at(TIMER_KINDS)
        return replace(fired, due_in=seconds_until(due, self._clock()))
