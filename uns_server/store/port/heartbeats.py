"""Heartbeats (``domain.heartbeats``): the operator's rows, their beats and pages, and
the one live ``heartbeat_deadline`` job each names. Pinned on both dialects by
``tests/store/test_port_heartbeats.py``."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Protocol

from uns_server.domain.heartbeats import Heartbeat
from uns_server.domain.jobs import NewJob


class HeartbeatReads(Protocol):
    async def get(self, heartbeat_id: str) -> Heartbeat | None: ...

    async def list_heartbeats(self, *, after: str | None, limit: int) -> Sequence[Heartbeat]:
        """Heartbeats by id, after ``after``."""
        ...


class Heartbeats(HeartbeatReads, Protocol):
    async def locked(self, heartbeat_ids: Collection[str]) -> Mapping[str, Heartbeat]:
        """The named heartbeats that exist, each locked until the transaction ends (in
        id order, so two lockers never deadlock on them)."""
        ...

    async def put(self, heartbeat: Heartbeat, *, actor: str, now: datetime) -> Heartbeat:
        """Create or replace the row as given (``updated_at``/``updated_by`` from
        ``now``/``actor``; ``created_at`` kept, or ``now`` for a new one), with an
        audit record (kind ``heartbeat``, PUT). A concurrent first put of the same id
        makes it raise what ``Store.is_lost_race`` recognises."""
        ...

    async def delete(self, heartbeat: Heartbeat, *, actor: str, now: datetime) -> None:
        """Remove the row, with an audit record (DELETE, the content before)."""
        ...

    async def beat(self, heartbeat_id: str, now: datetime) -> Heartbeat | None:
        """Set the last beat to ``now`` in one statement, locking the row; the row after
        it (None: no such heartbeat)."""
        ...

    async def record_page(
        self,
        heartbeat_id: str,
        *,
        paging: bool,
        notification_id: str | None,
        page_error: str,
        job_id: int | None,
    ) -> None:
        """The row's page and live job, as decided (the caller holds its lock)."""
        ...

    async def insert_timer(self, job: NewJob, now: datetime) -> int:
        """Insert a heartbeat's deadline job (available, due at its ``scheduled_at``);
        its id, for the row to name."""
        ...

    async def cancel_timer(self, job_id: int, now: datetime) -> bool:
        """Cancel the job if it is still waiting (available or retryable); a running
        or final one is left as it is (a running one completes stale). Whether it was."""
        ...
