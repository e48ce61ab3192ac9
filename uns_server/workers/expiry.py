"""Ack expiry: sweep PENDING acknowledgements past their deadline to TIMED_OUT."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from uns_server.services.acks import Acks
from uns_server.workers.loop import LoopWorker
from uns_server.workers.supervision import Supervision

log = logging.getLogger("uns.expiry")
SWEEP_BATCH = 500


@dataclass(frozen=True)
class Expired:
    expired: int  # acknowledgements timed out by this sweep
    due_in: float | None = None  # the next deadline is not read: the poll finds it

    @property
    def more(self) -> bool:
        return self.expired == SWEEP_BATCH


class ExpiryWorker(LoopWorker):
    name = "expiry"  # repeated sweep faults turn health NOT_SERVING

    def __init__(
        self, acks: Acks, poll_seconds: float, supervision: Supervision | None = None
    ) -> None:
        super().__init__(poll_seconds, supervision)
        self._acks = acks

    async def run_once(self) -> Expired:
        """Expire one batch."""
        expired = Expired(await self._acks.expire_due(SWEEP_BATCH))
        if expired.expired:
            log.info("acknowledgements timed out", extra={"count": expired.expired})
        return expired
