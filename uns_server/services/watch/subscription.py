"""One stream's place in the hub: a bounded queue of matching items, its wake-up and
its heartbeat timer.

The queue is bounded in events (``watch_queue_max``) and in bytes
(``watch_queue_max_bytes``, counted from each event's stored payload): a slow reader of
large events overflows as early as one of many small ones. An overflowing subscriber
drops its queue and goes back to the table from its own cursor (``streams``).
"""

from __future__ import annotations

import asyncio
from collections import deque

from uns_server.services.watch.items import WatchFilter, WatchItem

QUEUE_MAX = 10_000
QUEUE_MAX_BYTES = 8 * 1024 * 1024
# A heartbeat timer may fire this early (the loop runs timers within its clock resolution).
HEARTBEAT_SLACK_SECONDS = 0.001


class Subscription:
    """One stream's place in the hub: the matching events it has not sent yet.

    The hub only queues events the stream's filter matches, so a stream is woken for
    its own events only. Waking costs one future per wait; the heartbeat is one timer
    per heartbeat interval (re-armed from the last send), not one per event.
    """

    def __init__(
        self,
        flt: WatchFilter,
        queue_max: int,
        heartbeat_seconds: float,
        loop: asyncio.AbstractEventLoop,
        queue_max_bytes: int = QUEUE_MAX_BYTES,
    ) -> None:
        self.filter = flt
        self.queue: deque[WatchItem] = deque()
        self.queue_max = queue_max
        self.queue_max_bytes = queue_max_bytes
        self.queued_bytes = 0  # of the items in ``queue``
        self.overflowed = False
        self.overflows = 0  # times this subscriber fell behind and went back to the table
        self.heartbeat_due = False
        self._heartbeat = heartbeat_seconds
        self._loop = loop
        self._waiter: asyncio.Future[None] | None = None
        self._last_sent = loop.time()
        self._timer: asyncio.TimerHandle | None = loop.call_at(
            self._last_sent + heartbeat_seconds, self._tick
        )

    def offer(self, item: WatchItem) -> None:
        if self.overflowed:
            return
        if (
            len(self.queue) >= self.queue_max
            or self.queued_bytes + item.size > self.queue_max_bytes
        ):
            self.queue.clear()
            self.queued_bytes = 0
            self.overflowed = True
            self.overflows += 1
        else:
            self.queue.append(item)
            self.queued_bytes += item.size
        self.wake()

    def pop(self) -> WatchItem:
        item = self.queue.popleft()
        self.queued_bytes -= item.size
        return item

    def wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self) -> None:
        """Until there is something to do: an event, an overflow, a heartbeat or ``wake``."""
        if self.queue or self.overflowed or self.heartbeat_due:
            return
        waiter = self._waiter = self._loop.create_future()
        try:
            await waiter
        finally:
            self._waiter = None

    def sent(self) -> None:
        """The stream sent something: the next heartbeat is due a full interval later."""
        self._last_sent = self._loop.time()
        self.heartbeat_due = False

    def _tick(self) -> None:
        now = self._loop.time()
        due = self._last_sent + self._heartbeat
        if now >= due - HEARTBEAT_SLACK_SECONDS:
            self.heartbeat_due = True
            self.wake()
            due = now + self._heartbeat
        self._timer = self._loop.call_at(due, self._tick)

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
