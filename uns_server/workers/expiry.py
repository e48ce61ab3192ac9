"""Ack expiry: sweep PENDING acknowledgements past their deadline to TIMED_OUT."""

from __future__ import annotations

import asyncio
import logging

from uns_server.aio import wait_event
from uns_server.services.acks import Acks
from uns_server.workers.supervision import Supervision

log = logging.getLogger("uns.expiry")
SWEEP_BATCH = 500
# This worker's name in ``Supervision`` (repeated sweep faults turn health NOT_SERVING).
SUPERVISED_NAME = "expiry"


class ExpiryWorker:
    def __init__(
        self, acks: Acks, poll_seconds: float, supervision: Supervision | None = None
    ) -> None:
        self._acks = acks
        self._poll = poll_seconds
        self._supervision = supervision or Supervision()
        self._stopping = asyncio.Event()

    async def run_once(self) -> int:
        """Expire one batch; returns how many acks timed out."""
        return await self._acks.expire_due(SWEEP_BATCH)

    def stop(self) -> None:
        """Finish the current sweep, then return from ``run``."""
        self._stopping.set()

    async def run(self) -> None:
        while not self._stopping.is_set():
            try:
                expired = await self.run_once()
                self._supervision.succeeded(SUPERVISED_NAME)
                if expired:
                    log.info("acknowledgements timed out", extra={"count": expired})
                    if expired == SWEEP_BATCH:
                        continue
            except Exception:
                self._supervision.failed(SUPERVISED_NAME)
                log.exception("expiry sweep failed")
            await wait_event(self._stopping, self._poll)
