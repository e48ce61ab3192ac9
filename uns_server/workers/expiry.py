"""Ack expiry: time out PENDING acknowledgements whose deadline has passed, and end the
snoozes whose time is up (``services.snooze.Snoozes.end_due``, kind ``snooze_end``).

Each opened ack has an ``ack_deadline`` job of the work table, due at its deadline and
inserted by the settlement that opened it (``domain.ack_deadlines``). A round
(``Acks.time_out_due``, one transaction) claims due jobs, re-reads their notifications
locked, times out those still PENDING past their deadline (events, audit and message
updates as ever) and completes every job in one fenced settle; a stale timer (answered,
withdrawn) does nothing. With room left, the carry sweep times out PENDING acks past
their deadline that no job did: those opened by a replica of the previous release
during a rolling upgrade (removed with it by a later contract step). Between rounds
the worker sleeps until the next job falls due, at most its poll interval (which also
bounds how late the carry sweep finds the previous release's deadlines).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from uns_server.services.acks import Acks
from uns_server.services.snooze import Snoozes
from uns_server.workers.loop import LoopWorker
from uns_server.workers.supervision import Supervision

log = logging.getLogger("uns.expiry")
SWEEP_BATCH = 500


@dataclass(frozen=True)
class Expired:
    expired: int  # acknowledgements timed out by this round
    more: bool = False  # a full batch: look again at once
    due_in: float | None = None  # until the next ack_deadline job falls due


class ExpiryWorker(LoopWorker):
    name = "expiry"  # repeated sweep faults turn health NOT_SERVING

    def __init__(
        self,
        acks: Acks,
        poll_seconds: float,
        supervision: Supervision | None = None,
        *,
        snoozes: Snoozes | None = None,
    ) -> None:
        super().__init__(poll_seconds, supervision)
        self._acks = acks
        self._snoozes = snoozes

    async def run_once(self) -> Expired:
        """End the snoozes due (before the deadlines: an ended snooze's deadline is
        later), time out one batch; then, unless a batch was full, read when the next
        timer is due."""
        ended = await self._snoozes.end_due(SWEEP_BATCH) if self._snoozes else 0
        if ended:
            log.info("snoozes ended", extra={"count": ended})
        expiry = await self._acks.time_out_due(SWEEP_BATCH)
        if expiry.timed_out:
            log.info("acknowledgements timed out", extra={"count": expiry.timed_out})
        if expiry.full or ended >= SWEEP_BATCH:
            return Expired(expiry.timed_out, more=True)
        due = [await self._acks.next_deadline_in()]
        if self._snoozes is not None:
            due.append(await self._snoozes.next_end_in())
        return Expired(
            expiry.timed_out, due_in=min((d for d in due if d is not None), default=None)
        )
