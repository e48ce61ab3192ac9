"""How many WatchEvents streams may be open: per principal and server-wide.

Each principal may hold at most ``per_principal`` streams at once (setting
``watch_streams_per_principal``), and the server at most ``server_max`` (setting
``watch_streams_max``); one more is refused with TOO_MANY_STREAMS. A stream takes its
place when it starts and gives it back in ``finally``, however it ends (client
cancel, deadline, error, shutdown).
"""

from __future__ import annotations

from uns_server.domain.errors import TooManyStreams

STREAMS_PER_PRINCIPAL_DEFAULT = 100
STREAMS_MAX_DEFAULT = 5_000


class StreamLimits:
    def __init__(
        self,
        per_principal: int = STREAMS_PER_PRINCIPAL_DEFAULT,
        server_max: int = STREAMS_MAX_DEFAULT,
    ) -> None:
        self._per_principal = per_principal
        self._server_max = server_max
        self._streams: dict[str, int] = {}
        self.open_total = 0  # streams open across the server

    def open_streams(self, principal: str) -> int:
        """Streams ``principal`` holds open right now."""
        return self._streams.get(principal, 0)

    def acquire(self, principal: str) -> None:
        """Take a place for one more stream of ``principal``, or refuse it."""
        if self.open_total >= self._server_max:
            raise TooManyStreams(
                f"the server holds its limit of {self._server_max} WatchEvents "
                "streams; retry later, or against another replica",
                metadata={"scope": "server", "limit": str(self._server_max)},
            )
        held = self._streams.get(principal, 0)
        if held >= self._per_principal:
            raise TooManyStreams(
                f"{principal} already holds {held} WatchEvents streams (limit "
                f"{self._per_principal}); close one, or filter one stream instead of opening many",
                metadata={
                    "scope": "principal",
                    "principal": principal,
                    "open_streams": str(held),
                    "limit": str(self._per_principal),
                },
            )
        self._streams[principal] = held + 1
        self.open_total += 1

    def release(self, principal: str) -> None:
        self.open_total -= 1
        held = self._streams.get(principal, 0) - 1
        if held > 0:
            self._streams[principal] = held
        else:
            self._streams.pop(principal, None)
