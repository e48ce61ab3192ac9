"""Work that is due but that this server cannot deliver (SPEC §6): notifications whose
policy names a channel this server is not configured with. The dispatcher passes over
them (``store.dispatch``: a replica never claims work it cannot do), so without this
they would wait silently, PENDING with no attempt.

Every ``poll_seconds`` one query (``Queue.unserved_due`` of the store port) finds the unleased
pending leaders that have been due for longer than ``grace`` (time enough for a
replica that has the channel to claim them) and name a channel outside this server's
set. With several replicas that set is this server's configured channels: a row
counted here is one that no replica claimed within the grace. The result:

- the gauge ``uns_undeliverable_due_notifications{channel}`` (``QueueStats``), a
  notification counted under each channel it names that this server lacks;
- one warning per notification per ``log_every`` (its id, the channels, how long it
  has been due), not one per poll.

The console reads the same rule for one notification (``domain.lifecycle``-free: a
set difference) to say why it waits.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime, timedelta

from uns_server.observability.metrics import QueueStats
from uns_server.store.port import Store
from uns_server.workers.loop import LoopWorker

log = logging.getLogger("uns.dispatch")

GRACE = timedelta(seconds=60)
LOG_EVERY = timedelta(minutes=10)
POLL_SECONDS = 15.0
# Rows read per poll: the gauge counts at most this many (the oldest).
SCAN_LIMIT = 1000


@dataclass(frozen=True)
class Unserved:
    counts: dict[str, int]  # notifications by channel this server lacks
    more: bool = False
    due_in: float | None = None


class UndeliverableWatch(LoopWorker):
    name = "undeliverable"
    required = False  # a gauge and a log line: a failed scan keeps the last count

    def __init__(
        self,
        store: Store,
        channels: Collection[str],
        stats: QueueStats,
        clock: Callable[[], datetime],
        *,
        grace: timedelta = GRACE,
        log_every: timedelta = LOG_EVERY,
        poll_seconds: float = POLL_SECONDS,
    ) -> None:
        super().__init__(poll_seconds)
        self._store = store
        self._channels = frozenset(channels)
        self._stats = stats
        self._clock = clock
        self._grace = grace
        self._log_every = log_every
        self._logged: dict[str, datetime] = {}  # notification id -> last warning

    async def run_once(self) -> Unserved:
        """One scan: the count by missing channel (also written to the gauge)."""
        now = self._clock()
        async with self._store.read() as tx:
            leaders = await tx.queue.unserved_due(
                self._channels, now=now, due_before=now - self._grace, limit=SCAN_LIMIT
            )
        counts: Counter[str] = Counter()
        seen: dict[str, datetime] = {}
        for leader in leaders:
            nid, named, due_at = leader.notification_id, leader.channels, leader.due_since
            missing = [c for c in dict.fromkeys(named) if c not in self._channels]
            counts.update(missing)
            last = self._logged.get(nid)
            if last is None or now - last >= self._log_every:
                log.warning(
                    "notification due but no replica delivers its channel",
                    extra={
                        "notification_id": nid,
                        "channels": ",".join(missing),
                        "due_for_seconds": round((now - due_at).total_seconds()),
                        "configured_channels": ",".join(sorted(self._channels)),
                    },
                )
                last = now
            seen[nid] = last
        self._logged = seen  # forget those that moved on
        self._stats.undeliverable = dict(counts)
        return Unserved(dict(counts))
