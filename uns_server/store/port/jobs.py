"""The work table's port (SPEC §7 "One work engine"): River's job table as four
statements: a claim of many due rows, a fenced settle of many, a rescuer of expired
leases, a retention. The states and who moves each row out of which are
``domain.jobs``; the SQL is ``store.jobs``; ``tests/store/test_jobs.py`` pins each
method's contract on both dialects."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from typing import Protocol

from uns_server.domain.jobs import FINALIZED, JobKind, JobState, NewJob, SettleJob
from uns_server.domain.records import Job


class JobReads(Protocol):
    async def next_due_at(self, kinds: Collection[JobKind]) -> datetime | None:
        """When a job of ``kinds`` is next for ``claim``: the earliest ``scheduled_at``
        of an available or retryable row (None: none). Running rows are the rescuer's
        (``next_rescue_at``)."""
        ...

    async def next_rescue_at(self, kinds: Collection[JobKind]) -> datetime | None:
        """When a lease of ``kinds`` is next for ``rescue_expired``: the earliest
        ``lease_until`` of a running row (None: none running)."""
        ...


class Jobs(JobReads, Protocol):
    async def insert_many(self, jobs: Sequence[NewJob], now: datetime) -> None:
        """Insert ``jobs`` available, each due at its ``scheduled_at`` (else ``now``),
        attempt 0, in one statement."""
        ...

    async def claim(
        self, kinds: Collection[JobKind], *, now: datetime, limit: int, lease: timedelta
    ) -> Sequence[Job]:
        """Start up to ``limit`` due (``scheduled_at <= now``) available or retryable
        rows of ``kinds``, earliest ``scheduled_at`` first (then id), in one statement
        (rows another claimer has locked are skipped on PostgreSQL; SQLite has one
        writer): each running, ``attempt`` + 1, ``attempted_at`` = ``now``, under a
        fresh lease token until ``now + lease``. Returns them as claimed, in that
        order. A running row is never claimed: only its settle or the rescuer moves it."""
        ...

    async def settle_many(self, settles: Sequence[SettleJob], now: datetime) -> frozenset[int]:
        """Apply each settle in one statement, each to its row only while that row is
        running under the settle's ``lease_token``: the lease is released, a final state
        stamps ``finalized_at`` = ``now``, a retryable one takes its ``scheduled_at``,
        ``last_error`` is the settle's error. Returns the ids that landed; a settle whose
        id is absent lost its fence (rescued, claimed again, or already settled) and
        changed nothing: the one shape of a lost fence."""
        ...

    async def rescue_expired(
        self, kinds: Collection[JobKind], *, now: datetime, limit: int
    ) -> Sequence[Job]:
        """Up to ``limit`` running rows of ``kinds`` whose lease expired by ``now``
        (earliest expiry first), each back to retryable due at ``now`` or, with its
        attempts spent, discarded (``domain.jobs.rescued``), its lease released and
        ``last_error`` saying so; in one statement. Returns them as rescued."""
        ...

    async def delete_finished_before(
        self, cutoff: datetime, *, limit: int, states: Collection[JobState] = FINALIZED
    ) -> int:
        """Delete up to ``limit`` rows in ``states`` (final states only) finalized
        before ``cutoff``; how many went. Nothing else is ever deleted."""
        ...

    async def carry_message_updates(self, now: datetime, *, limit: int) -> int:
        """Move up to ``limit`` PENDING rows of the old outbox ``uns_message_updates``
        that no lease holds into ``uns_jobs`` as ``message_update`` jobs (their attempts,
        due time and last error kept), deleting them there; how many. The previous
        release queues updates only there, so during a rolling upgrade its rows are
        carried each round; gone with that table (a later contract migration)."""
        ...
