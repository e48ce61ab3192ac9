"""This process's maintenance windows in memory (``services.maintenance.OpenWindows``),
reloaded when a change was signalled (``TOPIC_MAINTENANCE``, here or by NOTIFY from
another process) or every ``services.maintenance.REFRESH_SECONDS``. Intake and the
claim read them to hold what a window covers without a query; a window's end is a
``window_end`` job fired by the timers (``workers.timers``).

Not ``required``: a hit is checked against the stored window in the transaction that
holds, so a stale copy only holds or lets go a little late.
"""

from __future__ import annotations

from dataclasses import dataclass

from uns_server.services.maintenance import OpenWindows
from uns_server.workers.loop import LoopWorker


@dataclass(frozen=True)
class Reloaded:
    reloaded: bool
    more: bool = False
    due_in: float | None = None


class MaintenanceWorker(LoopWorker):
    name = "maintenance"
    required = False

    def __init__(self, windows: OpenWindows, poll_seconds: float) -> None:
        super().__init__(poll_seconds)
        self._windows = windows
        windows.on_change(self.wake)

    async def run_once(self) -> Reloaded:
        stale = self._windows.stale
        if stale:
            await self._windows.refresh()
        return Reloaded(stale, due_in=self._windows.refresh_in())
