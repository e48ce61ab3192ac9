"""The event hub: one reader of newly committed events per process, fanned out in memory.

Woken by local commits and, on PostgreSQL, by LISTEN, the hub reads each new batch of
events once and offers every event to the subscriptions whose filter matches it: an
idle stream costs no queries at all.

Fan-out cost per event is what bounds commit-to-subscriber latency at a thousand
streams, so subscriptions are indexed by principal and grouped by identical filter
(an event is matched once per distinct filter, and queued only where it matches), and
every stream it reaches shares one ``WatchItem``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from uns_server.aio import wait_event
from uns_server.observability.phases import FAN_OUT, phased
from uns_server.services.watch.items import WatchFilter, WatchItem
from uns_server.services.watch.subscription import QUEUE_MAX, QUEUE_MAX_BYTES, Subscription
from uns_server.store.port import TOPIC_EVENTS, Store

log = logging.getLogger("uns.watch")

HUB_BATCH = 1000
# Safety net if a wake-up is ever lost (e.g. while LISTEN reconnects).
HUB_FALLBACK_POLL_SECONDS = 5.0
# With no stream open, the hub moves its tail at most this often: following every
# commit cost one query per commit for nobody (a quarter of all statements under
# SendNotification load). A stale tail only means the first read after a stream
# opens starts that much further back.
HUB_IDLE_TAIL_SECONDS = 0.25


class EventHub:
    def __init__(
        self, store: Store, queue_max: int = QUEUE_MAX, queue_max_bytes: int = QUEUE_MAX_BYTES
    ) -> None:
        self._store = store
        self._queue_max = queue_max
        self._queue_max_bytes = queue_max_bytes
        self._subs: set[Subscription] = set()
        # Fan-out index: principal (None: operators, who see every principal) ->
        # distinct filter -> its subscriptions. An event is matched once per distinct
        # filter of its own principal and of operators, not once per stream. A filter
        # over several tenants is indexed under each; an event has one principal, so
        # it still reaches each subscription at most once.
        self._index: dict[str | None, dict[WatchFilter, set[Subscription]]] = {}
        self.overflows = 0  # subscribers that fell behind, over the hub's life
        self._wake = asyncio.Event()
        self._subscribed = asyncio.Event()
        self._closing = asyncio.Event()
        self.tail = 0
        self._task: asyncio.Task[None] | None = None
        # Reads after every wake-up: on PostgreSQL over one kept connection (a pooled
        # read would add a ping, BEGIN and COMMIT to each).
        self._tail = store.event_tail()
        store.on_commit(TOPIC_EVENTS, self._wake.set)

    @property
    def subscribers(self) -> int:
        return len(self._subs)

    def subscriptions(self) -> list[Subscription]:
        """A snapshot of the live subscriptions (safe to take from another thread)."""
        return list(self._subs)

    @property
    def total_overflows(self) -> int:
        """Times any subscriber fell behind its buffer (ended and live streams)."""
        return self.overflows + sum(sub.overflows for sub in self.subscriptions())

    async def start(self) -> None:
        self.tail = await self._tail.high_water()
        self._task = asyncio.create_task(self._run())

    async def close(self) -> None:
        """End every stream (they answer UNAVAILABLE with their resume cursor)."""
        self._closing.set()
        for sub in self._subs:
            sub.wake()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._tail.close()

    @property
    def closing(self) -> bool:
        return self._closing.is_set()

    @phased(FAN_OUT)
    async def _run(self) -> None:
        while True:
            await wait_event(self._wake, HUB_FALLBACK_POLL_SECONDS)
            self._wake.clear()
            try:
                if not self._subs:
                    # Nobody to fan out to: only move the tail past what is committed
                    # (one indexed max() instead of reading and decoding every row).
                    high = await self._tail.high_water()
                    if not self._subs:
                        # Still nobody, at the moment the tail moves: a stream that
                        # registers later catches up with a snapshot taken after this
                        # max(), so it sees everything up to the new tail. (One that
                        # registered during the query may have taken its snapshot
                        # before ours: then the rows are read as usual.)
                        self.tail = max(self.tail, high)
                        self._subscribed.clear()
                        await wait_event(self._subscribed, HUB_IDLE_TAIL_SECONDS)
                        continue
                while True:
                    batch = await self._tail.read_after(self.tail, limit=HUB_BATCH)
                    for event in batch:
                        item = WatchItem(event)
                        self.publish(item)
                        self.tail = item.sequence
                    if len(batch) < HUB_BATCH:
                        break
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("event hub read failed; retrying on the next wake-up")

    def publish(self, item: WatchItem) -> None:
        """Queue ``item`` for every subscription whose filter matches it."""
        for key in (item.principal, None):
            groups = self._index.get(key)
            if groups:
                for flt, subs in groups.items():
                    if flt.matches(item):
                        for sub in subs:
                            sub.offer(item)

    def subscribe(self, flt: WatchFilter, heartbeat_seconds: float) -> Subscription:
        sub = Subscription(
            flt,
            self._queue_max,
            heartbeat_seconds,
            asyncio.get_running_loop(),
            self._queue_max_bytes,
        )
        self._subs.add(sub)
        for key in _index_keys(flt):
            self._index.setdefault(key, {}).setdefault(flt, set()).add(sub)
        self._subscribed.set()
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        sub.cancel()
        if sub not in self._subs:
            return
        self.overflows += sub.overflows
        self._subs.discard(sub)
        for key in _index_keys(sub.filter):
            groups = self._index[key]
            subs = groups[sub.filter]
            subs.discard(sub)
            if not subs:
                del groups[sub.filter]
                if not groups:
                    del self._index[key]


def _index_keys(flt: WatchFilter) -> list[str | None]:
    keys: list[str | None] = [None] if flt.principals is None else [*sorted(flt.principals)]
    return keys
