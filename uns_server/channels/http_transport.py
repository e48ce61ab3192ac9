"""The shared outbound HTTP client: one aiohttp session, keeping no cookies.

aiohttp parses HTTP in C and keeps a plain connection pool. The adapters used to speak
httpx on top of it (through httpx-aiohttp), and those layers cost more of a webhook
POST's CPU than aiohttp itself: 0.70 -> 0.40 ms per request at 16 in flight without
them (docs/PERFORMANCE.md).

One client serves every tenant's channels, so it keeps no cookies: a cookie one
provider sets must not ride along on later deliveries to the same host, for anyone.
It never follows redirects either (``channels._http``): a signed body stays where it
was sent.
"""

from __future__ import annotations

import urllib.request
from types import TracebackType
from typing import Self

import aiohttp

# aiohttp errors that prove the request did not leave: no connection was made.
NOT_SENT = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)


class OutboundClient:
    """The HTTP adapters' shared client: a bounded pool, no cookies, a fixed user agent.

    The session is made on first use, inside the running event loop (aiohttp binds it
    to that loop). With ``trust_env`` and a proxy variable set, aiohttp honours
    ``HTTP_PROXY`` / ``HTTPS_PROXY`` and ``NO_PROXY`` (and ``.netrc`` credentials).
    Without a proxy variable that is left off: it would read the environment again for
    every request. Tests on loopback pass ``trust_env=False``.
    """

    def __init__(
        self,
        *,
        max_connections: int,
        keepalive_expiry_seconds: float,
        headers: dict[str, str],
        trust_env: bool = True,
    ) -> None:
        self._max_connections = max_connections
        self._keepalive_expiry_seconds = keepalive_expiry_seconds
        self._headers = headers
        self._trust_env = trust_env and bool(urllib.request.getproxies())
        self._session: aiohttp.ClientSession | None = None
        self._closed = False

    def session(self) -> aiohttp.ClientSession:
        if self._closed:
            raise RuntimeError("the outbound HTTP client is closed")
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=self._max_connections,
                    keepalive_timeout=self._keepalive_expiry_seconds,
                ),
                headers=self._headers,
                cookie_jar=aiohttp.DummyCookieJar(),
                trust_env=self._trust_env,
                # Adapters time every request themselves (``channels._http.post``).
                timeout=aiohttp.ClientTimeout(total=None),
            )
        return self._session

    @property
    def is_closed(self) -> bool:
        return self._closed

    async def aclose(self) -> None:
        self._closed = True
        if self._session is not None:
            await self._session.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
