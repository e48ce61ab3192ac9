"""Whether a failure means the database is out of reach, for the transports (``api``,
``http``), which answer UNAVAILABLE / 503 for it and may not import the store."""

from __future__ import annotations

from uns_server.store.db import is_unreachable


def storage_unavailable(exc: BaseException) -> bool:
    """True for connection loss, refused connections and timeouts of the database
    (``store.db.is_unreachable``): retryable, unlike a refusal or a bug."""
    return is_unreachable(exc)
