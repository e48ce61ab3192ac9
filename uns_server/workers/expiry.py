"""Ack expiry: sweep PENDING acknowledgements past their deadline to TIMED_OUT."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from uns_server.services.acks import Acks

log = logging.getLogger("uns.expiry")
SWEEP_BATCH = 500


class ExpiryWorker:
    def __init__(self, acks: Acks, poll_seconds: float) -> None:
        self._acks = acks
        self._poll = poll_seconds

    async def run_once(self) -> int:
        """Expire one batch; returns how many acks timed out."""
        return await self._acks.expire_due(SWEEP_BATCH)

    async def run(self) -> None:
        while True:
            try:
                expired = await self.run_once()
                if expired:
                    log.info("acknowledgements timed out", extra={"count": expired})
                    if expired == SWEEP_BATCH:
                        continue
            except Exception:
                log.exception("expiry sweep failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.sleep(self._poll)
