"""Retention of provider-callback receipts: every ``POLL_SECONDS`` delete the receipts
older than ``CALLBACK_RECEIPT_DAYS`` (``Receipts.prune`` of the store port).

A receipt refuses a replayed Slack or PagerDuty callback (and makes a Telegram press
redelivered count once); past a week no provider replays one (Slack's own signatures
expire after five minutes, PagerDuty's never do, but a week-old webhook is not
retried). Not ``required``: a failed prune leaves the receipts for the next one, and
the server serves meanwhile.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from uns_server.store.port import Store
from uns_server.workers.loop import LoopWorker

log = logging.getLogger("uns.retention")
CALLBACK_RECEIPT_DAYS = 7
POLL_SECONDS = 3600.0


@dataclass(frozen=True)
class Pruned:
    receipts: int  # receipts deleted
    more: bool = False
    due_in: float | None = None


class ReceiptPruner(LoopWorker):
    name = "callback_receipts"
    required = False

    def __init__(
        self,
        store: Store,
        clock: Callable[[], datetime],
        *,
        keep: timedelta = timedelta(days=CALLBACK_RECEIPT_DAYS),
        poll_seconds: float = POLL_SECONDS,
    ) -> None:
        super().__init__(poll_seconds)
        self._store = store
        self._clock = clock
        self._keep = keep

    async def run_once(self) -> Pruned:
        async with self._store.write() as tx:
            pruned = Pruned(await tx.receipts.prune(self._clock() - self._keep))
        if pruned.receipts:
            log.info("callback receipts pruned", extra={"count": pruned.receipts})
        return pruned
