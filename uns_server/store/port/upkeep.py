"""The housekeeping ports: retention of settled history, the backlog the samplers
read, planner statistics, and the provider-callback receipts."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Protocol

from uns_server.domain.records import RetentionCandidate
from uns_server.store.port.values import Backlog, Statistics, UnservedLeader


class RetentionReads(Protocol):
    """What may be pruned: every query that asks "is this row settled?" agrees with
    ``domain.retention.holds_work``."""

    async def settled_before(self, cutoff: datetime, limit: int) -> Sequence[RetentionCandidate]:
        """Rows holding no work, quiet (no update, no event) since ``cutoff``."""
        ...

    async def existing_ids(self, ids: Sequence[str]) -> set[str]:
        """Those of ``ids`` that exist."""
        ...

    async def linked_to(self, ids: Sequence[str]) -> Sequence[tuple[str, str]]:
        """(row, target) for every row whose dedup owner or successor is in ``ids``."""
        ...

    async def live_window_owners(self, ids: Sequence[str], now: datetime) -> set[str]:
        """Those of ``ids`` owning a dedup window that can still coalesce."""
        ...

    async def events_of(self, ids: Sequence[str]) -> tuple[int, int]:
        """(count, highest sequence) of the events of ``ids``."""
        ...

    async def stale_events(self, cutoff: datetime, exclude: Sequence[str]) -> tuple[int, int]:
        """(count, highest sequence) of events before ``cutoff`` of rows holding no work."""
        ...

    async def expired_windows(self, cutoff: datetime) -> Sequence[str]:
        """Keys of dedup windows ended before ``cutoff`` whose owner holds no work (or
        is gone)."""
        ...

    async def expirable_keys(self, cutoff: datetime, exclude: Sequence[str]) -> int:
        """How many idempotency keys ``expire_keys`` would tombstone (``exclude``: rows
        deleted instead)."""
        ...

    async def compacted_sequence(self) -> int:
        """The highest event sequence retention has deleted up to (0: none)."""
        ...


class Retention(RetentionReads, Protocol):
    """Guarded deletion of settled history."""

    async def lock(self) -> None:
        """One pruner at a time (until commit)."""
        ...

    async def delete_notifications(self, ids: Sequence[str]) -> int:
        """Delete those of ``ids`` that still hold no work; how many went."""
        ...

    async def delete_events_of(self, ids: Sequence[str]) -> int:
        """Delete the events of ``ids``; how many."""
        ...

    async def delete_stale_events(self, cutoff: datetime, *, up_to_sequence: int) -> int:
        """Delete the events ``stale_events`` counted, up to ``up_to_sequence``."""
        ...

    async def delete_windows(self, keys: Sequence[str], cutoff: datetime) -> int:
        """Delete those expired windows still expired; how many."""
        ...

    async def expire_keys(self, cutoff: datetime) -> int:
        """Tombstone the idempotency keys of rows created before ``cutoff`` that hold
        no work; how many."""
        ...

    async def raise_compacted_sequence(self, sequence: int, now: datetime) -> int:
        """Raise the compacted sequence to ``sequence`` (never lower it); the new one."""
        ...


class Queue(Protocol):
    """The backlog of pending leaders, for the samplers."""

    async def backlog(self, now: datetime) -> Backlog:
        """Due, leased and scheduled leaders, and the oldest due time."""
        ...

    async def unserved_due(
        self, channels: Collection[str], *, now: datetime, due_before: datetime, limit: int
    ) -> Sequence[UnservedLeader]:
        """Unleased leaders due since before ``due_before`` naming a channel outside
        ``channels`` (work that dispatcher never claims), oldest first."""
        ...


class PlannerStatistics(Protocol):
    """The query planner's statistics on the hot tables (PostgreSQL)."""

    async def state(self, min_rows: int) -> Statistics:
        """Analyzed, too few rows to matter, or missing."""
        ...

    async def analyze(self) -> None:
        """Analyze the hot tables now."""
        ...


class Receipts(Protocol):
    """Accepted provider callbacks, by digest (a replay is refused)."""

    async def record(self, digest: str, provider: str, now: datetime) -> bool:
        """Remember an accepted callback; False if it was already there (a replay)."""
        ...

    async def prune(self, before: datetime) -> int:
        """Forget receipts older than ``before``; how many."""
        ...
