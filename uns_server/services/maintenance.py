"""Maintenance windows (SPEC §7 "Quiet on purpose"): the one implementation behind
``uns.v1.MaintenanceService`` and ``uns-admin windows``, the windows each process
keeps in memory (``OpenWindows``), and the hold intake and the claim put on what a
window covers (rules in ``domain.maintenance``).

Puts create or replace by id; every put and delete writes an audit record (the
operator, the time, the content) in the same transaction, and signals
``TOPIC_MAINTENANCE`` so every process reloads its windows (NOTIFY on PostgreSQL;
each process also reloads every ``REFRESH_SECONDS``). A put inserts the window's end
timer (``window_end``); a delete ends the window now: what it held is due at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime

from uns_server.domain import paging
from uns_server.domain.errors import InvalidRequest, NotFound
from uns_server.domain.jobs import NewJob
from uns_server.domain.maintenance import (
    END_KIND,
    END_MAX_ATTEMPTS,
    MaintenanceWindow,
    WindowChange,
    end_job,
    holding,
    holds,
    releases,
    window_of,
)
from uns_server.domain.people import check_id
from uns_server.domain.records import Job
from uns_server.store.port import TOPIC_MAINTENANCE, TOPIC_WORK, Store, WriteTransaction

Clock = Callable[[], datetime]

# Windows a process keeps in memory at most (those not ended, earliest end first).
WINDOWS_MAX = 1000
# How often a process reloads its windows without being told of a change (a NOTIFY
# missed while reconnecting; ``uns-admin`` writing to a SQLite file).
REFRESH_SECONDS = 30.0
_TOKEN_VERSION = 1
_PUT_RETRIES = 3


class OpenWindows:
    """The windows not yet ended, in memory: the claim (the hot path) and intake ask
    them without a read; a hit is checked against the stored window (``verified``)."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self._store = store
        self._clock = clock
        self._windows: tuple[MaintenanceWindow, ...] = ()
        self._loaded_at: float | None = None  # time.monotonic() of the last load
        self._listeners: list[Callable[[], None]] = []
        store.on_commit(TOPIC_MAINTENANCE, self.changed)

    @property
    def all(self) -> tuple[MaintenanceWindow, ...]:
        return self._windows

    def on_change(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` (must not block) when a window changed somewhere."""
        self._listeners.append(callback)

    def changed(self) -> None:
        self._loaded_at = None
        for callback in self._listeners:
            callback()

    @property
    def stale(self) -> bool:
        return self._loaded_at is None or time.monotonic() - self._loaded_at >= REFRESH_SECONDS

    def refresh_in(self) -> float:
        """Seconds until the next periodic reload."""
        if self._loaded_at is None:
            return 0.0
        return max(0.0, REFRESH_SECONDS - (time.monotonic() - self._loaded_at))

    async def refresh(self) -> None:
        loaded_at = time.monotonic()
        async with self._store.read() as tx:
            found = await tx.maintenance.not_ended(self._clock(), limit=WINDOWS_MAX)
        self._windows = tuple(found)
        self._loaded_at = loaded_at

    def holding(
        self, notification_type: str, intent: str | None, at: datetime
    ) -> MaintenanceWindow | None:
        if not self._windows:
            return None
        return holding(self._windows, notification_type, intent, at)

    async def verified(
        self,
        tx: WriteTransaction,
        window: MaintenanceWindow,
        notification_type: str,
        intent: str | None,
        at: datetime,
    ) -> MaintenanceWindow | None:
        """The stored window, if it still holds such a notification at ``at`` (a
        change this process has not reloaded yet is seen here): one read per hold,
        none per claim."""
        stored = await tx.maintenance.get(window.window_id)
        if stored is None or not holds(stored, notification_type, intent, at):
            self._loaded_at = None  # reload at the next chance
            return None
        return stored


def _encode(last: str) -> str:
    return paging.encode_token(_TOKEN_VERSION, "windows", last)


def _decode(token: str) -> str | None:
    if not token:
        return None
    try:
        version, kind, last = paging.decode_token(token, 3)
        if version != _TOKEN_VERSION or kind != "windows" or not isinstance(last, str):
            raise ValueError(token)
    except ValueError:
        raise InvalidRequest.of_field("page_token", "not a token from this server") from None
    return last


def _not_found(window_id: str) -> NotFound:
    return NotFound(f"no maintenance window {window_id}", metadata={"window_id": window_id})


class MaintenanceService:
    """``windows``: this process's windows in memory, reloaded once a change commits
    (None: ``uns-admin`` on the database, whose servers reload on the signal)."""

    def __init__(self, store: Store, clock: Clock, windows: OpenWindows | None = None) -> None:
        self._store = store
        self._clock = clock
        self._windows = windows

    async def put(self, actor: str, window: MaintenanceWindow) -> MaintenanceWindow:
        """Create or replace the window (validated by ``domain.maintenance.build_window``).
        What an existing window held: still held, until the new end, while it stays
        open with the same types; otherwise released at once (re-held by the claim if
        another window holds it)."""
        for attempt in range(_PUT_RETRIES):
            try:
                stored = await self._put_once(actor, window)
                break
            except Exception as exc:
                if not self._store.is_lost_race(exc) or attempt == _PUT_RETRIES - 1:
                    raise
        await self._reload()
        return stored

    async def _put_once(self, actor: str, window: MaintenanceWindow) -> MaintenanceWindow:
        now = self._clock()
        async with self._store.write() as tx:
            before = await tx.maintenance.get(window.window_id)
            stored = await tx.maintenance.put(window, actor=actor, now=now)
            if before is not None:
                keeps = (
                    stored.is_open(now) and before.notification_types == stored.notification_types
                )
                released = await tx.maintenance.retime_held(
                    stored.window_id, until=stored.end_time if keeps else None, now=now
                )
                if released and not keeps:
                    tx.signal(TOPIC_WORK)
            await tx.jobs.insert_many([end_job(stored)], now)
            tx.signal(TOPIC_MAINTENANCE)
        return stored

    async def get(self, window_id: str) -> MaintenanceWindow:
        check_id(window_id, "window_id")
        async with self._store.read() as tx:
            found = await tx.maintenance.get(window_id)
        if found is None:
            raise _not_found(window_id)
        return found

    async def list(
        self, page_size: int = 0, page_token: str = ""
    ) -> tuple[list[MaintenanceWindow], str]:
        limit = paging.page_limit(page_size)
        after = _decode(page_token)
        async with self._store.read() as tx:
            rows = list(await tx.maintenance.list_windows(after=after, limit=limit + 1))
        if len(rows) <= limit:
            return rows, ""
        rows = rows[:limit]
        return rows, _encode(rows[-1].window_id)

    async def delete(self, actor: str, window_id: str) -> MaintenanceWindow:
        """End the window now: remove it and release what it held. A timer due now
        releases, once more, anything a process that had not reloaded yet held by it
        meanwhile."""
        check_id(window_id, "window_id")
        now = self._clock()
        async with self._store.write() as tx:
            found = await tx.maintenance.delete(window_id, actor=actor, now=now)
            if found is None:
                raise _not_found(window_id)
            if await tx.maintenance.retime_held(window_id, until=None, now=now):
                tx.signal(TOPIC_WORK)
            again = NewJob(END_KIND, {"window_id": window_id}, END_MAX_ATTEMPTS)
            await tx.jobs.insert_many([again], now)
            tx.signal(TOPIC_MAINTENANCE)
        await self._reload()
        return found

    async def changes(self, limit: int) -> Sequence[WindowChange]:
        """The latest audit records of every window, newest first (the console)."""
        async with self._store.read() as tx:
            return await tx.maintenance.changes(limit=limit)

    async def _reload(self) -> None:
        if self._windows is not None:
            await self._windows.refresh()


async def end_windows(tx: WriteTransaction, jobs: Sequence[Job], now: datetime) -> int:
    """The due ``window_end`` jobs of a timers round (``workers.timers``, which claimed
    them in ``tx`` and completes them): each job's window, once it is gone or has ended
    (``domain.maintenance.releases``), releases what it held (due now, the hold
    cleared). A job whose window was moved later does nothing: the put that moved it
    inserted the later one. How many notifications were released."""
    released = 0
    for job in jobs:
        window_id = window_of(job)
        if window_id and releases(await tx.maintenance.get(window_id), now):
            released += await tx.maintenance.retime_held(window_id, until=None, now=now)
    if released:
        tx.signal(TOPIC_WORK)  # due now: the dispatchers claim them
    return released
