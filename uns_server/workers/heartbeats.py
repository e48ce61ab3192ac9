"""Heartbeat deadlines: page the heartbeats that went silent (``domain.heartbeats``).

Each round is ``HeartbeatDeadlines.run_due`` (one transaction: claim the due
``heartbeat_deadline`` jobs, decide, page, settle); between rounds the worker sleeps
until the next job falls due, at most its poll interval, or a wake-up.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from uns_server.services.heartbeat_deadlines import HeartbeatDeadlines
from uns_server.services.heartbeats import TOPIC_HEARTBEATS
from uns_server.store.port import Store
from uns_server.workers.loop import LoopWorker, seconds_until
from uns_server.workers.supervision import Supervision

BATCH = 100


@dataclass(frozen=True)
class HeartbeatRound:
    paged: int  # heartbeats that turned PAGING in this round
    refused: int = 0  # pages the intake refused (tried again later)
    more: bool = False  # a full batch: look again at once
    due_in: float | None = None  # until the next deadline job falls due


class HeartbeatWorker(LoopWorker):
    name = "heartbeats"  # repeated faults turn health NOT_SERVING

    def __init__(
        self,
        store: Store,
        deadlines: HeartbeatDeadlines,
        clock: Callable[[], datetime],
        poll_seconds: float,
        supervision: Supervision | None = None,
    ) -> None:
        super().__init__(poll_seconds, supervision)
        self._deadlines = deadlines
        self._clock = clock
        store.on_commit(TOPIC_HEARTBEATS, self.wake)  # a put or a beat armed a deadline

    async def run_once(self) -> HeartbeatRound:
        done = await self._deadlines.run_due(BATCH)
        if done.full:
            return HeartbeatRound(done.paged, done.refused, more=True)
        due = await self._deadlines.next_due_at()
        return HeartbeatRound(done.paged, done.refused, due_in=seconds_until(due, self._clock()))
