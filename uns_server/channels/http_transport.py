# ruff: noqa: ASYNC109  (the ``timeout`` parameters are httpcore's interface)
"""httpx's transport for the shared HTTP client, minus a cost httpcore pays per request.

Before each request and after each response, httpcore's pool asks every idle
keep-alive connection whether its peer closed it (``get_extra_info("is_readable")``).
Through anyio that rebuilds the socket's whole attribute table on every question, and
with the dispatcher's tens of connections the pool's bookkeeping took more CPU than the
HTTP exchange itself (encode/httpcore#928). Our streams keep the socket they connected
and poll it directly; everything else is httpcore's (``AnyIOBackend``).
Measured: 1.65 -> 1.24 ms of CPU per POST at 16 in flight (docs/PERFORMANCE.md).
"""

from __future__ import annotations

import select
import socket
import ssl
import urllib.request
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx


def polling_transport(limits: httpx.Limits) -> httpx.AsyncHTTPTransport | None:
    """httpx's default transport on our network backend; None where proxies are set in
    the environment (the client then builds httpx's own transports, which use them)."""
    if urllib.request.getproxies():
        return None
    transport = httpx.AsyncHTTPTransport(limits=limits)
    # The same pool httpx builds (AsyncHTTPTransport.__init__, no proxy), with a backend.
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=httpx.create_ssl_context(),
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        network_backend=_Backend(),
    )
    return transport


class _Backend(httpcore.AsyncNetworkBackend):
    def __init__(self) -> None:
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        stream = await self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        return _Stream(stream)

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        return _Stream(await self._inner.connect_unix_socket(path, timeout, socket_options))

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _Stream(httpcore.AsyncNetworkStream):
    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self._inner = inner
        self._socket: socket.socket | None = inner.get_extra_info("socket")

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return _Stream(await self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            return _readable(self._socket)
        return self._inner.get_extra_info(info)


def _readable(sock: socket.socket | None) -> bool:
    """An idle HTTP/1.1 connection with bytes to read was closed by its peer (or is
    broken): either way the pool must not reuse it. As httpcore's own check, a socket
    without a descriptor counts as readable."""
    fd = -1 if sock is None else sock.fileno()
    if fd < 0:
        return True
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))
