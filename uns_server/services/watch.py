"""WatchEvents: a push-based, resumable, gap-free event stream.

One ``EventHub`` per process reads each newly committed batch of events once (woken
by local commits and, on PostgreSQL, by LISTEN) and fans it out in memory: an idle
stream costs no queries at all.

A stream sees only the events of notifications in its caller's tenants
(``Principal.tenants``: a producer's own principal, a responder's own plus those it
responds for, every principal for an operator); its filters narrow that, never widen it.

Fan-out cost per event is what bounds commit-to-subscriber latency at a thousand
streams, so: subscriptions are indexed by principal and grouped by identical filter
(an event is matched once per distinct filter, and queued only where it matches);
every stream it reaches shares one ``WatchItem``, which the API encodes once; a
stream waits on a single future (no timeout per event) and its heartbeat is one
timer per interval. What remains per stream is grpc's own per-message cost.

A subscription is gap-free because it registers with the hub *before* catching up
from the database. Event sequences are allocated in commit order (``store.events``),
so every event is either visible to the catch-up query (committed earlier) or will
be read by the hub after registration (committed later) — the overlap is dropped by
sequence. A subscriber that falls too far behind (its queue overflows) drops the
queue and catches up from the database again, from its own cursor.

Each principal may hold at most ``streams_per_principal`` streams open at once (setting
``watch_streams_per_principal``), and the server at most ``streams_max`` (setting
``watch_streams_max``); one more is refused with TOO_MANY_STREAMS. The counts are taken
when a stream starts and given back in ``finally``, however the stream ends (client
cancel, deadline, error, shutdown).

A subscriber's queue is bounded in events (``watch_queue_max``) and in bytes
(``watch_queue_max_bytes``, counted from each event's stored payload): a slow reader of
large events overflows as early as one of many small ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

import orjson
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from uns_server.aio import wait_event
from uns_server.domain.errors import (
    FieldViolation,
    HistoryCompacted,
    InvalidRequest,
    ShuttingDown,
    TooManyStreams,
)
from uns_server.observability.phases import FAN_OUT, phased
from uns_server.services.auth import Principal
from uns_server.store import events, retention
from uns_server.store.db import TOPIC_EVENTS, Database

log = logging.getLogger("uns.watch")

T = TypeVar("T")
HUB_BATCH = 1000
CATCH_UP_BATCH = 500
QUEUE_MAX = 10_000
QUEUE_MAX_BYTES = 8 * 1024 * 1024
# What an event costs besides its payload (row, item, protobuf message), in bytes.
EVENT_OVERHEAD_BYTES = 512
STREAMS_MAX_DEFAULT = 5_000
# Safety net if a wake-up is ever lost (e.g. while LISTEN reconnects).
HUB_FALLBACK_POLL_SECONDS = 5.0
# With no stream open, the hub moves its tail at most this often: following every
# commit cost one query per commit for nobody (a quarter of all statements under
# SendNotification load). A stale tail only means the first read after a stream
# opens starts that much further back.
HUB_IDLE_TAIL_SECONDS = 0.25
# A heartbeat timer may fire this early (the loop runs timers within its clock resolution).
HEARTBEAT_SLACK_SECONDS = 0.001
STREAMS_PER_PRINCIPAL_DEFAULT = 100
# Distinct notification ids one stream may filter on (each is a bound SQL parameter).
NOTIFICATION_IDS_MAX = 1000


class WatchItem:
    """One event row as streams see it. The hub makes one per committed event and
    hands the same item to every matching subscription, so the API layer can encode
    the event once (``encoded``) and share the result with every stream it reaches."""

    __slots__ = (
        "encoded",
        "kind",
        "notification_id",
        "notification_type",
        "principal",
        "row",
        "sequence",
        "size",
    )

    def __init__(self, row: RowMapping) -> None:
        self.row = row
        self.sequence: int = row["sequence"]
        self.principal: str = row["principal"]
        self.notification_id: str = row["notification_id"]
        self.kind: str = row["kind"]
        self.notification_type: str = row["notification_type"]
        self.encoded: object | None = None  # the API layer's cache; never mutated once set
        self.size = EVENT_OVERHEAD_BYTES + payload_bytes(row["payload"])


def payload_bytes(payload: object) -> int:
    """Roughly the bytes of a stored event payload (its JSON text; a decoded document
    is measured by its compact JSON, which the hub pays once per event)."""
    if isinstance(payload, str | bytes):
        return len(payload)
    return len(orjson.dumps(payload, default=str))


@dataclass(frozen=True)
class WatchFilter:
    principals: frozenset[str] | None  # the caller's tenants; None: every one (operators)
    notification_ids: frozenset[str]
    kinds: frozenset[str]
    notification_type: str

    def matches(self, item: WatchItem) -> bool:
        return (
            (self.principals is None or item.principal in self.principals)
            and (not self.notification_ids or item.notification_id in self.notification_ids)
            and (not self.kinds or item.kind in self.kinds)
            and (not self.notification_type or item.notification_type == self.notification_type)
        )


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


@dataclass(frozen=True)
class Heartbeat:
    high_water_sequence: int


class EventHub:
    def __init__(
        self, db: Database, queue_max: int = QUEUE_MAX, queue_max_bytes: int = QUEUE_MAX_BYTES
    ) -> None:
        self._db = db
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
        # PostgreSQL: the hub keeps one autocommit connection for its reads, so a
        # wake-up costs one round trip (a pooled read would add a ping, BEGIN and
        # COMMIT). SQLite reads in-process through its small reader pool instead.
        self._dedicated = db.dialect == "postgresql"
        self._conn: AsyncConnection | None = None
        db.on_commit(TOPIC_EVENTS, self._wake.set)

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
        async with self._db.read() as conn:
            self.tail = await events.high_water(conn)
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
        if self._conn is not None:
            conn, self._conn = self._conn, None
            with contextlib.suppress(Exception):
                await conn.close()

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
                    high = await self._read(events.high_water)
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
                    rows = await self._read(self._after_tail)
                    for row in rows:
                        item = WatchItem(row)
                        self.publish(item)
                        self.tail = item.sequence
                    if len(rows) < HUB_BATCH:
                        break
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("event hub read failed; retrying on the next wake-up")

    async def _after_tail(self, conn: AsyncConnection) -> list[RowMapping]:
        """The next batch of events after ``tail``."""
        return await events.read_after(conn, self.tail, limit=HUB_BATCH)

    async def _read(self, query: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        if not self._dedicated:
            async with self._db.read() as conn:
                return await query(conn)
        if self._conn is not None:
            try:
                return await self._query(self._conn, query)
            except Exception as exc:
                # The kept connection broke since the last read (e.g. PostgreSQL
                # restarted): replace it at once, as the pool's idle ping would have.
                log.info("event hub connection lost (%s); reconnecting", type(exc).__name__)
        return await self._query(await self._connect(), query)

    async def _query(
        self, conn: AsyncConnection, query: Callable[[AsyncConnection], Awaitable[T]]
    ) -> T:
        try:
            return await query(conn)
        except BaseException:
            self._conn = None
            with contextlib.suppress(Exception):
                await conn.invalidate()
            with contextlib.suppress(Exception):
                await conn.close()
            raise

    async def _connect(self) -> AsyncConnection:
        conn = await self._db.reader.connect()
        try:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
        except BaseException:
            with contextlib.suppress(Exception):
                await conn.close()
            raise
        self._conn = conn
        return conn

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


class Watch:
    def __init__(
        self,
        db: Database,
        hub: EventHub,
        heartbeat_seconds: float,
        clock: Callable[[], datetime],
        streams_per_principal: int = STREAMS_PER_PRINCIPAL_DEFAULT,
        streams_max: int = STREAMS_MAX_DEFAULT,
    ) -> None:
        self._db = db
        self._hub = hub
        self._heartbeat = heartbeat_seconds
        self._clock = clock
        self._streams_max = streams_per_principal
        self._streams: dict[str, int] = {}
        self._server_streams_max = streams_max
        self.open_total = 0  # streams open across the server

    def open_streams(self, principal: str) -> int:
        """Streams ``principal`` holds open right now."""
        return self._streams.get(principal, 0)

    def _acquire(self, principal: str) -> None:
        if self.open_total >= self._server_streams_max:
            raise TooManyStreams(
                f"the server holds its limit of {self._server_streams_max} WatchEvents "
                "streams; retry later, or against another replica",
                metadata={"scope": "server", "limit": str(self._server_streams_max)},
            )
        held = self._streams.get(principal, 0)
        if held >= self._streams_max:
            raise TooManyStreams(
                f"{principal} already holds {held} WatchEvents streams (limit "
                f"{self._streams_max}); close one, or filter one stream instead of opening many",
                metadata={
                    "scope": "principal",
                    "principal": principal,
                    "open_streams": str(held),
                    "limit": str(self._streams_max),
                },
            )
        self._streams[principal] = held + 1
        self.open_total += 1

    def _release(self, principal: str) -> None:
        self.open_total -= 1
        held = self._streams.get(principal, 0) - 1
        if held > 0:
            self._streams[principal] = held
        else:
            self._streams.pop(principal, None)

    async def start_cursor(self, after_sequence: int, replay_history: bool) -> int:
        if after_sequence == 0 and replay_history:
            # "All retained history": it starts where retention left off.
            async with self._db.read() as conn:
                return await retention.compacted_sequence(conn)
        if after_sequence > 0:
            # Retention deleted events up to the horizon: resuming below it would be a
            # silent gap, so refuse and say where to resync from (etcd compact_revision).
            async with self._db.read() as conn:
                horizon = await retention.compacted_sequence(conn)
                newest = await events.high_water(conn)
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
        async with self._db.read() as conn:
            return await events.high_water(conn)

    async def stream(
        self,
        principal: Principal,
        *,
        cursor: int,
        notification_ids: Sequence[str],
        kinds: Sequence[str],
        notification_type: str,
    ) -> AsyncIterator[WatchItem | Heartbeat]:
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
        self._acquire(principal.name)
        sub = self._hub.subscribe(flt, self._heartbeat)
        positioned = False
        try:
            while True:
                # Catch up from the database (first, and after any overflow).
                sub.overflowed = False
                while True:
                    async with self._db.read() as conn:
                        rows = await events.read_after(
                            conn,
                            cursor,
                            limit=CATCH_UP_BATCH,
                            principals=flt.principals,
                            notification_ids=notification_ids,
                            kinds=kinds,
                            notification_type=notification_type,
                        )
                    for row in rows:
                        cursor = row["sequence"]
                        sub.sent()
                        yield WatchItem(row)
                    if len(rows) < CATCH_UP_BATCH:
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
                    sub.sent()
                    yield Heartbeat(cursor)
                # Live: send what the hub queued (only events this filter matches).
                queue = sub.queue
                while not sub.overflowed:
                    if self._hub.closing:
                        raise ShuttingDown(metadata={"resume_after_sequence": str(cursor)})
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
                        yield Heartbeat(cursor)
                        continue
                    await sub.wait()
        finally:
            self._hub.unsubscribe(sub)
            self._release(principal.name)
