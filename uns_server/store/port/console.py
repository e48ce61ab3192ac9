"""The operator console's own rows and reads: its sessions, and the bounded counts and
windows its pages show (``store.console``). Every read counts at most ``cap + 1`` rows
through an index or reads a bounded window, so a page costs the same on ten rows as on
ten million."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from uns_server.domain.enums import EventKind
from uns_server.domain.records import (
    ConsoleSession,
    Event,
    FailedSummary,
    PolicyType,
    RecentEvent,
)


class ConsoleReads(Protocol):
    async def state_counts(self, now: datetime, cap: int) -> dict[str, int]:
        """The overview's counts by name (delivered in the last day, needing action,
        resolved, acks pending, acks due within the hour), each at most ``cap + 1``."""
        ...

    async def queue_counts(self, now: datetime, cap: int) -> tuple[dict[str, int], bool]:
        """``due``, ``in_flight`` and ``scheduled`` from one pass over at most ``cap + 1``
        PENDING rows, and whether the pass stopped there (each count a lower bound)."""
        ...

    async def failed(self, *, dead_letter: bool, limit: int) -> list[FailedSummary]:
        """The newest FAILED rows of one triage bucket."""
        ...

    async def recent_events(
        self, kinds: Sequence[EventKind], since: datetime, window: int
    ) -> list[RecentEvent]:
        """Events of ``kinds`` at or after ``since`` among the newest ``window``."""
        ...

    async def created_at(self, ids: Sequence[str]) -> dict[str, datetime]: ...

    async def policy_types(self, limit: int) -> list[PolicyType]: ...

    async def notification_events(self, notification_id: str, limit: int) -> list[Event]:
        """One notification's newest ``limit`` events, oldest first."""
        ...


class ConsoleSessionReads(Protocol):
    async def by_hash(self, id_hash: str) -> ConsoleSession | None: ...


class ConsoleSessions(ConsoleSessionReads, Protocol):
    async def insert(
        self,
        *,
        id_hash: str,
        principal: str,
        key_hash: str,
        csrf_token: str,
        now: datetime,
        expires_at: datetime,
    ) -> None: ...

    async def touch(self, id_hash: str, now: datetime) -> None: ...

    async def remove(self, id_hash: str) -> None: ...

    async def purge_expired(self, now: datetime) -> int:
        """Delete the sessions past their absolute expiry; how many."""
        ...
