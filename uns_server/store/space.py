"""A full disk: its own fault, told apart from an unreachable database.

SQLite answers a write that needs a page it cannot have with ``SQLITE_FULL`` (13): the
filesystem is out of space (``ENOSPC`` on a write of the database or its WAL; SQLite's
``unixWrite`` maps exactly that errno to SQLITE_FULL and every other to an I/O error),
or the file reached ``PRAGMA max_page_count``. PostgreSQL answers ``disk_full``
(SQLSTATE 53100). Both arrive as SQLAlchemy's ``OperationalError`` (or asyncpg's own
error), which alone would read as "the database is unreachable"; they are classified
by that code, never by the message text.

``StorageSpace`` is what the database handle knows about it: full since the first
write that failed that way (logged once, naming the SQLite file and the space its
filesystem has left), until a check finds room again (SQLite: free space on the
filesystem and pages the file may still grow by; PostgreSQL: the next write that
commits). Health answers NOT_SERVING meanwhile (``app.health``); nothing needs a
restart once space is freed.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger("uns.store")

SQLITE_FULL = 13
PG_DISK_FULL = "53100"
# Room that counts as "writes can go on" once full: below it, the next group of
# accepts would most likely fail again.
MIN_FREE_BYTES = 8 * 1024 * 1024
MIN_FREE_PAGES = 64


def is_storage_full(exc: BaseException | None) -> bool:
    """Does this failure (or what it wraps) say the database's storage is full?"""
    seen = 0
    while exc is not None and seen < 10:
        code = getattr(exc, "sqlite_errorcode", None)
        if isinstance(code, int) and code & 0xFF == SQLITE_FULL:  # primary code of extended
            return True
        if getattr(exc, "sqlstate", None) == PG_DISK_FULL:
            return True
        orig = getattr(exc, "orig", None)  # SQLAlchemy's DBAPIError wraps the driver's
        exc = orig if isinstance(orig, BaseException) else exc.__cause__ or exc.__context__
        seen += 1
    return False


def describe_free(path: str) -> str:
    """The file and what its filesystem has left, for the log."""
    try:
        usage = shutil.disk_usage(os.path.dirname(os.path.abspath(path)) or ".")
    except OSError as exc:
        return f"SQLite file {path} (free space unknown: {exc.strerror})"
    return (
        f"SQLite file {path}: {usage.free} bytes ({_size(usage.free)}) free of "
        f"{_size(usage.total)} on its filesystem"
    )


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def free_bytes(path: str) -> int:
    return shutil.disk_usage(os.path.dirname(os.path.abspath(path)) or ".").free


@dataclass
class StorageSpace:
    """Whether writes are failing for want of space. ``path``: the SQLite file (None
    for PostgreSQL, whose disk UNS cannot see)."""

    path: str | None
    dialect: str = "sqlite"
    full: bool = False
    # Called when ``full`` changes (health re-evaluates at once).
    listeners: list[Callable[[], None]] = field(default_factory=list)

    def failed(self, exc: BaseException) -> None:
        """A write failed with ``exc``: full from now on if it says so."""
        if self.full or not is_storage_full(exc):
            return
        self.full = True
        if self.path:
            where = describe_free(self.path)
        elif self.dialect == "postgresql":
            where = "PostgreSQL answered SQLSTATE 53100 (disk_full): free space on its server"
        else:
            where = f"{self.dialect} database"
        log.error(
            "database storage is full: writes fail until space is freed; %s",
            where,
            extra={"database_file": self.path},
        )
        self._changed()

    def room_again(self, detail: str) -> None:
        if not self.full:
            return
        self.full = False
        log.warning("database storage has room again: %s", detail)
        self._changed()

    def _changed(self) -> None:
        for listener in self.listeners:
            listener()
