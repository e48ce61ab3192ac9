"""Whether a failure means the database is out of reach, or out of space, for the
transports (``api``, ``http``), which answer UNAVAILABLE / 503, or RESOURCE_EXHAUSTED
/ STORAGE_FULL, for it and may not import the store."""

from __future__ import annotations

from uns_server.store.db import is_storage_full, is_unreachable


def storage_unavailable(exc: BaseException) -> bool:
    """True for connection loss, refused connections and timeouts of the database
    (``store.db.is_unreachable``): retryable, unlike a refusal or a bug."""
    return is_unreachable(exc)


def storage_full(exc: BaseException) -> bool:
    """True when the database refused a write for want of space (SQLite's SQLITE_FULL,
    PostgreSQL's disk_full, ``store.space``): asked before ``storage_unavailable``,
    which SQLite's OperationalError would also satisfy."""
    return is_storage_full(exc)
