"""Open client connections, per peer address and server-wide (docs/deployment.md,
"Connections and file descriptors").

Every client connection holds file descriptors, and the process has a bounded number
of them, shared with the database pool, the LISTEN connection, the providers' HTTP
clients and the health checks. The gRPC front (``api.front``) and the HTTP listener
(``http.server``) each ask their ``ConnectionCaps`` before they keep a connection: one
address holds at most ``per_peer`` of the listener's, and the listener at most
``total`` (sized with the other listener's below the descriptor limit,
``app.descriptors``; a flood of one listener leaves the other, and its health checks,
alone). A refused connection is closed at once, unanswered; what it says in the log is
rate-limited (``RefusalLog``), because a flood refuses thousands a second.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

# At most one log line per refusal kind per this many seconds (with the count since).
REFUSAL_LOG_SECONDS = 10.0


class RefusalLog:
    """Warns about refused connections at most once per ``REFUSAL_LOG_SECONDS`` per
    kind; each line says how many were refused since the previous one."""

    def __init__(
        self, log: logging.Logger, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self._log = log
        self._monotonic = monotonic
        self._last: dict[str, float] = {}
        self._unreported: dict[str, int] = {}

    def refused(self, kind: str, message: str, peer: str) -> None:
        count = self._unreported.get(kind, 0) + 1
        now = self._monotonic()
        last = self._last.get(kind)
        if last is not None and now - last < REFUSAL_LOG_SECONDS:
            self._unreported[kind] = count
            return
        self._last[kind] = now
        self._unreported[kind] = 0
        self._log.warning(
            message, extra={"peer": peer, "refused": count, "per_seconds": REFUSAL_LOG_SECONDS}
        )


class ConnectionCaps:
    """One listener's open connections, by peer address and in total."""

    def __init__(self, per_peer: int, total: int) -> None:
        """``per_peer``: connections one address may hold; ``total``: the listener's
        (0: no cap, either)."""
        self.per_peer = per_peer
        self.total = total
        self.open_total = 0
        self._open: dict[str, int] = {}

    def open_from(self, peer: str) -> int:
        return self._open.get(peer, 0)

    def admit(self, peer: str) -> str | None:
        """Counts a new connection in: None, or why it is refused (``"peer"``: the
        address holds ``per_peer`` already; ``"server"``: the listener holds ``total``)."""
        if 0 < self.total <= self.open_total:
            return "server"
        held = self._open.get(peer, 0)
        if 0 < self.per_peer <= held:
            return "peer"
        self._open[peer] = held + 1
        self.open_total += 1
        return None

    def refusal(self, refusal: str) -> str:
        """What a refusal says in the log."""
        if refusal == "peer":
            return f"peer at its cap of {self.per_peer}"
        return f"the server at its cap of {self.total}"

    def release(self, peer: str) -> None:
        left = self._open.get(peer, 1) - 1
        if left > 0:
            self._open[peer] = left
        else:
            self._open.pop(peer, None)
        self.open_total -= 1
