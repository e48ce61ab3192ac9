"""Maintenance windows (``domain.maintenance``): the windows, their audit records, and
the holds they put on notifications."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from uns_server.domain.maintenance import ClaimHold, MaintenanceWindow, WindowChange


class MaintenanceReads(Protocol):
    async def get(self, window_id: str) -> MaintenanceWindow | None: ...

    async def list_windows(self, *, after: str | None, limit: int) -> Sequence[MaintenanceWindow]:
        """Windows by id, after ``after``, ended ones too."""
        ...

    async def not_ended(self, now: datetime, *, limit: int) -> Sequence[MaintenanceWindow]:
        """Windows whose end is after ``now`` (open or to come), earliest end first:
        what each process keeps in memory."""
        ...

    async def changes(self, *, limit: int) -> Sequence[WindowChange]:
        """The latest audit records of every window, newest first."""
        ...


class Maintenance(MaintenanceReads, Protocol):
    async def put(
        self, window: MaintenanceWindow, *, actor: str, now: datetime
    ) -> MaintenanceWindow:
        """Create or replace the window by id, with its audit record; the window as
        stored. Two concurrent first puts of one id: the loser's transaction fails as
        a lost race (``Store.is_lost_race``)."""
        ...

    async def delete(
        self, window_id: str, *, actor: str, now: datetime
    ) -> MaintenanceWindow | None:
        """Remove the window, with its audit record; the window as it was (None: none)."""
        ...

    async def hold(self, holds: Sequence[ClaimHold], now: datetime) -> set[str]:
        """Hold claimed leaders (lease released, attempt counters given back, due and
        held until ``until``, the window named), each only while its token still holds
        its lease; the ids held."""
        ...

    async def retime_held(self, window_id: str, *, until: datetime | None, now: datetime) -> int:
        """The rows the window holds: held until ``until`` (the PENDING unleased ones due
        then), or with None released (PENDING ones due now if later, the hold cleared).
        How many rows it held."""
        ...
