"""The SQL implementation of the housekeeping ports (``store.port.upkeep``: retention,
the backlog, planner statistics, the callback receipts), bound like ``sql_ports``."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime

from uns_server.domain.records import RetentionCandidate
from uns_server.store import links, queue, retention, statistics
from uns_server.store.bound import Bound
from uns_server.store.port import Backlog, Statistics, UnservedLeader


class SqlRetentionReads(Bound):
    __slots__ = ()

    async def settled_before(self, cutoff: datetime, limit: int) -> Sequence[RetentionCandidate]:
        return await retention.settled_before(self._conn, cutoff, limit)

    async def existing_ids(self, ids: Sequence[str]) -> set[str]:
        return await retention.existing_ids(self._conn, ids)

    async def linked_to(self, ids: Sequence[str]) -> Sequence[tuple[str, str]]:
        return await retention.linked_to(self._conn, ids)

    async def live_window_owners(self, ids: Sequence[str], now: datetime) -> set[str]:
        return await retention.live_window_owners(self._conn, ids, now)

    async def events_of(self, ids: Sequence[str]) -> tuple[int, int]:
        return await retention.events_of(self._conn, ids)

    async def stale_events(self, cutoff: datetime, exclude: Sequence[str]) -> tuple[int, int]:
        return await retention.stale_events(self._conn, cutoff, exclude)

    async def expired_windows(self, cutoff: datetime) -> Sequence[str]:
        return await retention.expired_windows(self._conn, cutoff)

    async def expirable_keys(self, cutoff: datetime, exclude: Sequence[str]) -> int:
        return await retention.expirable_keys(self._conn, cutoff, exclude)

    async def compacted_sequence(self) -> int:
        return await retention.compacted_sequence(self._conn)


class SqlRetention(SqlRetentionReads):
    __slots__ = ()

    async def lock(self) -> None:
        await retention.lock(self._conn)

    async def delete_notifications(self, ids: Sequence[str]) -> int:
        return await retention.delete_notifications(self._conn, ids)

    async def delete_events_of(self, ids: Sequence[str]) -> int:
        return await retention.delete_events_of(self._conn, ids)

    async def delete_stale_events(self, cutoff: datetime, *, up_to_sequence: int) -> int:
        return await retention.delete_stale_events(
            self._conn, cutoff, up_to_sequence=up_to_sequence
        )

    async def delete_windows(self, keys: Sequence[str], cutoff: datetime) -> int:
        return await retention.delete_windows(self._conn, keys, cutoff)

    async def expire_keys(self, cutoff: datetime) -> int:
        return await retention.expire_keys(self._conn, cutoff)

    async def raise_compacted_sequence(self, sequence: int, now: datetime) -> int:
        return await retention.raise_compacted_sequence(self._conn, sequence, now)


class SqlQueue(Bound):
    __slots__ = ()

    async def backlog(self, now: datetime) -> Backlog:
        return Backlog(*await queue.queue_stats(self._conn, now))

    async def unserved_due(
        self, channels: Collection[str], *, now: datetime, due_before: datetime, limit: int
    ) -> Sequence[UnservedLeader]:
        found = await queue.unserved_due(
            self._conn, channels, now=now, due_before=due_before, limit=limit
        )
        return [UnservedLeader(*row) for row in found]


class SqlPlannerStatistics(Bound):
    __slots__ = ()

    async def state(self, min_rows: int) -> Statistics:
        return await statistics.state(self._conn, min_rows)

    async def analyze(self) -> None:
        await statistics.analyze(self._conn)


class SqlReceipts(Bound):
    __slots__ = ()

    async def record(self, digest: str, provider: str, now: datetime) -> bool:
        return await links.record_callback(self._conn, digest, provider, now)

    async def prune(self, before: datetime) -> int:
        return await links.prune_callbacks(self._conn, before)
