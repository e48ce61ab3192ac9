"""CPU seconds and memory of the processes under test, through psutil when it is there.

PostgreSQL forks a backend per connection, so its figure is the sum over the
postmaster and its live children plus the postmaster's reaped-children times
(``children_user``/``children_system``): a backend that exits inside the window
(pgbench's, at the end of its run) is counted when the postmaster reaps it.
Without psutil every figure is ``None`` and the columns print blank.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

try:
    import psutil  # type: ignore[import-untyped]
except ImportError:  # pragma: no cover - degrade, the table shows blanks
    psutil = None


def _cpu_of(pid: int) -> float | None:
    if psutil is None:
        return None
    try:
        times = psutil.Process(pid).cpu_times()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    return float(times.user + times.system)


def _tree_cpu(pid: int) -> float | None:
    """CPU of a process, its live descendants and its reaped children.

    A child reaped between reading the root and reading the children would be lost
    (or counted twice), so the snapshot is retried until the root's reaped-children
    total did not move while the children were read.
    """
    if psutil is None:
        return None
    total = 0.0
    for _attempt in range(5):
        try:
            root = psutil.Process(pid)
            before = root.cpu_times()
            live = 0.0
            for proc in root.children(recursive=True):
                try:
                    times = proc.cpu_times()
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
                live += float(times.user + times.system)
            after = root.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return None
        reaped = float(after.children_user + after.children_system)
        total = float(after.user + after.system) + reaped + live
        if reaped == float(before.children_user + before.children_system):
            break
    return total


def rss_mb(pid: int) -> float | None:
    if psutil is None:
        return None
    try:
        return float(psutil.Process(pid).memory_info().rss) / (1024 * 1024)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


@dataclass
class Window:
    server: float | None
    db: float | None
    client: float | None


class CpuMeter:
    """Snapshots of (server, PostgreSQL tree, this process); ``stop`` gives the deltas."""

    def __init__(
        self,
        server_pid: Callable[[], int | None],
        postmaster_pid: int | None,
        *,
        tree: bool = False,
    ) -> None:
        """``tree``: the server is a supervisor (``--processes N``): count its children."""
        self._server_pid = server_pid
        self._pg = postmaster_pid
        self._tree = tree
        self._start: tuple[Any, ...] | None = None

    def _snapshot(self) -> tuple[int | None, float | None, float | None, float | None]:
        pid = self._server_pid()
        server = (_tree_cpu(pid) if self._tree else _cpu_of(pid)) if pid else None
        db = _tree_cpu(self._pg) if self._pg else None
        return pid, server, db, _cpu_of(os.getpid())

    def start(self) -> None:
        self._start = self._snapshot()

    def stop(self) -> Window:
        assert self._start is not None, "start() first"
        pid0, server0, db0, client0 = self._start
        pid1, server1, db1, client1 = self._snapshot()
        server = server1 - server0 if server0 is not None and server1 is not None else None
        if pid0 != pid1:
            server = None
        db = db1 - db0 if db0 is not None and db1 is not None else None
        client = client1 - client0 if client0 is not None and client1 is not None else None
        return Window(server, db, client)


def postmaster_pid(data_dir: str) -> int | None:
    try:
        with open(os.path.join(data_dir, "postmaster.pid")) as fh:
            return int(fh.readline().strip())
    except (OSError, ValueError):
        return None
