"""WatchEvents streams: each one's filter, its gap-free catch-up and its live tail.

A stream sees only the events of notifications in its caller's tenants
(``Principal.tenants``: a producer's own principal, a responder's own plus those it
responds for, every principal for an operator); its filters narrow that, never widen it.

A subscription is gap-free because it registers with the hub *before* catching up
from the database. Event sequences are allocated in commit order (``store.events``),
so every event is either visible to the catch-up query (committed earlier) or will
be read by the hub after registration (committed later) — the overlap is dropped by
sequence. A subscriber that falls too far behind (its queue overflows) drops the
queue and catches up from the database again, from its own cursor.

A stream outlives no credential: every ``CREDENTIAL_RECHECK_SECONDS``, on a timer (so
an idle stream ends as soon as a busy one), it re-checks its caller's key
(``recheck``); a revoked key ends it with ``Unauthenticated`` carrying
``resume_after_sequence``. A check that cannot reach the database keeps the stream
(its key was valid at the last check) and is tried again at the next.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import datetime

from uns_server.domain.errors import (
    FieldViolation,
    HistoryCompacted,
    InvalidRequest,
    ShuttingDown,
    Unauthenticated,
)
from uns_server.services.auth import Principal
from uns_server.services.watch.hub import EventHub
from uns_server.services.watch.items import StreamHeartbeat, WatchFilter, WatchItem
from uns_server.services.watch.limits import (
    STREAMS_MAX_DEFAULT,
    STREAMS_PER_PRINCIPAL_DEFAULT,
    StreamLimits,
)
from uns_server.store.port import Store

log = logging.getLogger("uns.watch")

CATCH_UP_BATCH = 500
# How often a stream re-checks its caller's credential. With the key cache
# (``services.auth.CACHE_SECONDS``) a revoked key's streams end within about twice this.
CREDENTIAL_RECHECK_SECONDS = 5.0
# Distinct notification ids one stream may filter on (each is a bound SQL parameter).
NOTIFICATION_IDS_MAX = 1000


class _Recheck:
    """A stream's credential check, due every ``CREDENTIAL_RECHECK_SECONDS``: the
    timer wakes the stream, which runs the check before whatever it sends next."""

    def __init__(self, check: Callable[[], Awaitable[object]], wake: Callable[[], None]) -> None:
        self._check = check
        self._wake = wake
        self.due = False
        self._timer: asyncio.TimerHandle | None = None
        self._arm()

    def _arm(self) -> None:
        self._timer = asyncio.get_running_loop().call_later(CREDENTIAL_RECHECK_SECONDS, self._fire)

    def _fire(self) -> None:
        self.due = True
        self._wake()

    async def run(self, cursor: int) -> None:
        self.due = False
        try:
            await self._check()
        except Unauthenticated as exc:
            raise Unauthenticated(
                exc.message, metadata={**exc.metadata, "resume_after_sequence": str(cursor)}
            ) from None
        except Exception as exc:  # the database is unreachable: keep the stream for now
            log.debug("watch credential re-check failed: %s", type(exc).__name__)
        self._arm()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


class Watch:
    def __init__(
        self,
        store: Store,
        hub: EventHub,
        heartbeat_seconds: float,
        clock: Callable[[], datetime],
        streams_per_principal: int = STREAMS_PER_PRINCIPAL_DEFAULT,
        streams_max: int = STREAMS_MAX_DEFAULT,
    ) -> None:
        self._store = store
        self._hub = hub
        self._heartbeat = heartbeat_seconds
        self._clock = clock
        self.limits = StreamLimits(streams_per_principal, streams_max)

    @property
    def open_total(self) -> int:
        """Streams open across the server."""
        return self.limits.open_total

    def open_streams(self, principal: str) -> int:
        """Streams ``principal`` holds open right now."""
        return self.limits.open_streams(principal)

    async def start_cursor(self, after_sequence: int, replay_history: bool) -> int:
        if after_sequence == 0 and replay_history:
            # "All retained history": it starts where retention left off.
            async with self._store.read() as tx:
                return await tx.retention.compacted_sequence()
        if after_sequence > 0:
            # Retention deleted events up to the horizon: resuming below it would be a
            # silent gap, so refuse and say where to resync from (etcd compact_revision).
            async with self._store.read() as tx:
                horizon = await tx.retention.compacted_sequence()
                newest = await tx.events.high_water()
            if after_sequence > newest:
                # No event of this database ever had it (a cursor from another database,
                # or from before a restore): waiting for it would skip the events that
                # take those sequences here (Kubernetes: "too large resource version").
                description = f"must be at most {newest}, the newest event's sequence"
                raise InvalidRequest(
                    f"after_sequence: {description}; re-read state, then resume after "
                    f"sequence {newest}",
                    metadata={"fields": "after_sequence", "high_water_sequence": str(newest)},
                    violations=[FieldViolation("after_sequence", description)],
                )
            if after_sequence < horizon:
                raise HistoryCompacted(
                    f"events up to sequence {horizon} were pruned by retention; "
                    f"re-read state, then resume after sequence {horizon}",
                    metadata={
                        "resync_from_sequence": str(horizon),
                        "after_sequence": str(after_sequence),
                    },
                )
            return after_sequence
        async with self._store.read() as tx:
            return await tx.events.high_water()

    async def stream(
        self,
        principal: Principal,
        *,
        cursor: int,
        notification_ids: Sequence[str],
        kinds: Sequence[str],
        notification_type: str,
        recheck: Callable[[], Awaitable[object]] | None = None,
    ) -> AsyncIterator[WatchItem | StreamHeartbeat]:
        """``recheck`` raises ``Unauthenticated`` once the caller's credential is no
        longer valid (module docstring); None: never re-checked (the console checks
        its session itself)."""
        # Duplicates would only multiply bound SQL parameters (a 1 MiB request holds
        # ~500k packed enum values): filter on each distinct value once.
        notification_ids = sorted(set(notification_ids))
        kinds = sorted(set(kinds))
        if "\x00" in notification_type:  # PostgreSQL cannot compare text holding NUL
            raise InvalidRequest(
                "notification_type: must not contain NUL characters",
                metadata={"fields": "notification_type"},
                violations=[FieldViolation("notification_type", "must not contain NUL characters")],
            )
        if len(notification_ids) > NOTIFICATION_IDS_MAX:
            raise InvalidRequest(
                f"notification_ids: at most {NOTIFICATION_IDS_MAX} distinct ids per stream",
                metadata={"fields": "notification_ids", "limit": str(NOTIFICATION_IDS_MAX)},
                violations=[
                    FieldViolation(
                        "notification_ids", f"must hold at most {NOTIFICATION_IDS_MAX} ids"
                    )
                ],
            )
        flt = WatchFilter(
            principals=principal.tenants,
            notification_ids=frozenset(notification_ids),
            kinds=frozenset(kinds),
            notification_type=notification_type,
        )
        self.limits.acquire(principal.name)
        sub = self._hub.subscribe(flt, self._heartbeat)
        check = _Recheck(recheck, sub.wake) if recheck is not None else None
        positioned = False
        try:
            while True:
                # Catch up from the database (first, and after any overflow).
                sub.overflowed = False
                while True:
                    if check is not None and check.due:
                        await check.run(cursor)
                    async with self._store.read() as tx:
                        # Read first: sequences commit in order (the event-order lock), so
                        # every event up to this one is committed and the batch below sees
                        # all of those the filter matches.
                        committed = await tx.events.high_water()
                        batch = await tx.events.read_after(
                            cursor,
                            limit=CATCH_UP_BATCH,
                            principals=flt.principals,
                            notification_ids=notification_ids,
                            kinds=kinds,
                            notification_type=notification_type,
                        )
                    for event in batch:
                        cursor = event.sequence
                        sub.sent()
                        yield WatchItem(event)
                    if len(batch) < CATCH_UP_BATCH:
                        break
                if not positioned:
                    # Give every stream a position at once, so a client that drops
                    # before the first event still resumes exactly here. Nothing queued
                    # and no overflow since the catch-up began: the hub has offered this
                    # stream nothing, so every event it matches up to the hub's tail came
                    # in the catch-up, and the position is the current high water.
                    positioned = True
                    if not sub.queue and not sub.overflowed:
                        cursor = max(cursor, self._hub.tail)
                    # The hub's tail may lag what the catch-up read (it moves on a wake-up):
                    # the last batch had every matching event up to ``committed``.
                    cursor = max(cursor, committed)
                    sub.sent()
                    yield StreamHeartbeat(cursor)
                # Live: send what the hub queued (only events this filter matches).
                queue = sub.queue
                while not sub.overflowed:
                    if self._hub.closing:
                        raise ShuttingDown(metadata={"resume_after_sequence": str(cursor)})
                    if check is not None and check.due:
                        await check.run(cursor)
                        continue
                    if queue:
                        item = sub.pop()
                        if item.sequence > cursor:  # else the catch-up already sent it
                            cursor = item.sequence
                            sub.sent()
                            yield item
                        continue
                    if sub.heartbeat_due:
                        # The queue is empty and the hub has offered everything up to
                        # its tail: nothing this stream matches is missing below it.
                        cursor = max(cursor, self._hub.tail)
                        sub.sent()
                        yield StreamHeartbeat(cursor)
                        continue
                    await sub.wait()
        finally:
            if check is not None:
                check.cancel()
            self._hub.unsubscribe(sub)
            self.limits.release(principal.name)
