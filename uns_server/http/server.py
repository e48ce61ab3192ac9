"""The aiohttp web server that runs next to the gRPC server, in the same process.

Every request is bounded like an RPC: its body by ``http_max_body_bytes`` (413 past
it) and its handling by ``http_request_timeout_seconds`` (503 past it, or 408 when it
is the client's body that never came). Every answer
carries headers that keep capability URLs out of caches, referrers and frames, and a
``Server-Timing: app;dur=MS`` header with the time the handler took (not for streams).

Every connection is bounded too (``_GuardedHandler``): its request headers must be
complete within ``http_header_timeout_seconds`` of it opening (or of its previous
answer), an idle keep-alive connection closes after ``http_keepalive_timeout_seconds``,
one peer address holds at most ``http_max_connections_per_peer``, and the listener at
most ``max_connections`` (``services.connection_caps``: the process's file descriptors,
shared with gRPC); refusals are logged at most once per 10 s.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import grpc
from aiohttp import web, web_protocol
from google.rpc import error_details_pb2

from uns_server.http.connect_wire import DOMAIN, Refusal
from uns_server.services.connection_caps import ConnectionCaps, RefusalLog
from uns_server.settings import Settings, SettingsError

log = logging.getLogger("uns.http")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
SHUTDOWN_TIMEOUT_SECONDS = 5.0
# The request's ``asyncio.Timeout``: a streaming handler reschedules it to None.
DEADLINE_KEY = web.RequestKey("uns.deadline", asyncio.Timeout)
# Action links are capabilities in the URL: never cached, never sent as a Referer to
# another site (same-origin, not no-referrer: with no-referrer browsers send
# "Origin: null" on the page's own form, which the Origin check must refuse), never
# framed; pages run no script and load nothing from elsewhere.
SECURITY_HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "X-Robots-Tag": "noindex, nofollow",
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
}


CONNECT_PREFIX = f"/{DOMAIN}."  # POST /uns.v1.Service/Method


def _timed_out(request: web.Request, status: int, message: str) -> web.Response:
    """A JSON-over-HTTP call gets the Connect error body its client parses (code and
    ErrorInfo); a page gets plain text."""
    if request.path.startswith(CONNECT_PREFIX):
        code = grpc.StatusCode.DEADLINE_EXCEEDED if status == 408 else grpc.StatusCode.UNAVAILABLE
        info = error_details_pb2.ErrorInfo(reason=code.name, domain=DOMAIN)
        return Refusal(code, message, [info], http_status=status).response()
    return web.Response(status=status, text=message + "\n")


def _client_gone(request: web.Request) -> bool:
    """Is the client's own connection closed (not, say, the database's)?"""
    transport = request.transport
    return transport is None or transport.is_closing()


def _bounded(timeout_seconds: float) -> Any:  # aiohttp's own middleware type
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        try:
            async with asyncio.timeout(timeout_seconds) as deadline:
                # A long-lived stream (the console's Server-Sent Events) lifts it.
                request[DEADLINE_KEY] = deadline
                response = await handler(request)
        except TimeoutError:
            log.warning("http request timed out", extra={"path": request.path})
            if request.body_exists and not request.content.is_eof():
                # The client's body never came: say so, it is not us being busy. The
                # one body deadline: handlers read bodies under this one.
                response = _timed_out(request, 408, "The request body did not arrive.")
            else:
                response = _timed_out(request, 503, "Service busy, try again.")
        except web.HTTPException as exc:  # 404, 405, 413, redirects: answered, not raised
            response = web.Response(
                status=exc.status, reason=exc.reason, text=exc.text, headers=exc.headers
            )
        except Exception as exc:
            if isinstance(exc, ConnectionResetError) and _client_gone(request):
                # The client went away mid-answer (a stream it closed): nothing to
                # answer, and aiohttp ends the connection quietly. Not a fault.
                log.info("http client disconnected", extra={"path": request.path})
                raise
            log.exception("http handler failed", extra={"path": request.path})
            response = web.Response(status=500, text="Internal error.\n")
        if not response.prepared:  # a stream has sent its headers already
            # The handler's own time, for browsers' dev tools and the console bench.
            elapsed_ms = (time.perf_counter() - started) * 1000
            response.headers["Server-Timing"] = f"app;dur={elapsed_ms:.1f}"
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    return middleware


def _server_ssl(settings: Settings) -> ssl.SSLContext | None:
    if not settings.tls_enabled:
        return None
    assert settings.tls_cert_file and settings.tls_key_file
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(settings.tls_cert_file, settings.tls_key_file)
    return ctx


class _GuardedHandler(web_protocol.RequestHandler):
    """aiohttp's connection handler, closed when its headers do not arrive in time and
    refused past the peer's connection cap (aiohttp has neither)."""

    def __init__(self, limits: _Limits, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._uns_limits = limits
        self._uns_timer: asyncio.TimerHandle | None = None
        self._uns_peer: str | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        peername = transport.get_extra_info("peername")
        peer = str(peername[0]) if isinstance(peername, tuple) and peername else ""
        limits = self._uns_limits
        refusal = limits.caps.admit(peer)
        if refusal is not None:
            message = f"http connections refused: {limits.caps.refusal(refusal)}"
            limits.refusals.refused(refusal, message, peer)
            self.force_close()
            return
        self._uns_peer = peer
        self._uns_arm()

    def _uns_arm(self) -> None:
        if self._uns_timer is None:
            loop = asyncio.get_running_loop()
            self._uns_timer = loop.call_later(self._uns_limits.header_timeout, self._uns_expire)

    def _uns_expire(self) -> None:
        self._uns_timer = None
        if not self._request_in_progress and not self._messages:
            log.info("http connection closed: headers not complete in time")
            self.force_close()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._messages or self._request_in_progress:  # a whole request head arrived
            if self._uns_timer is not None:
                self._uns_timer.cancel()
                self._uns_timer = None
        else:  # part of a request head, on a new or a kept-alive connection
            self._uns_arm()

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._uns_timer is not None:
            self._uns_timer.cancel()
            self._uns_timer = None
        if self._uns_peer is not None:
            self._uns_limits.caps.release(self._uns_peer)
            self._uns_peer = None
        super().connection_lost(exc)


class _Limits:
    def __init__(self, header_timeout: float, caps: ConnectionCaps) -> None:
        self.header_timeout = header_timeout
        self.caps = caps
        self.refusals = RefusalLog(log)


class _GuardedSite(web.TCPSite):
    """``TCPSite`` whose connections are ``_GuardedHandler``s."""

    def __init__(self, runner: web.AppRunner, limits: _Limits, *args: Any, **kwargs: Any):
        super().__init__(runner, *args, **kwargs)
        self._uns_limits = limits

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner
        server = self._runner.server
        assert server is not None
        # web.Server.__call__ builds a RequestHandler from these same arguments.
        make = server._kwargs, server._loop

        def factory() -> _GuardedHandler:
            return _GuardedHandler(self._uns_limits, server, loop=make[1], **make[0])

        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            factory,
            self._host,
            self._port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
        )
        sockets = self._server.sockets
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port


class HttpServer:
    """Owns the aiohttp application and its listening socket."""

    def __init__(
        self,
        settings: Settings,
        routes: Iterable[web.AbstractRouteDef],
        max_connections: int = 0,
    ) -> None:
        """``max_connections``: the listener's cap on open connections (0: none), sized
        with gRPC's below the open-file limit (``app.descriptors``)."""
        self._settings = settings
        self._max_connections = max_connections
        self.app = web.Application(
            client_max_size=settings.http_max_body_bytes,
            middlewares=[_bounded(settings.http_request_timeout_seconds)],
        )
        self.app.add_routes(list(routes))
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def start(self) -> None:
        s = self._settings
        host, _, port = s.http_listen.rpartition(":")
        try:
            ssl_context = _server_ssl(s)
        except (OSError, ssl.SSLError) as exc:
            raise SettingsError(f"cannot load the TLS certificate for HTTP: {exc}") from exc
        self._runner = web.AppRunner(
            self.app,
            access_log=None,
            shutdown_timeout=SHUTDOWN_TIMEOUT_SECONDS,
            keepalive_timeout=s.http_keepalive_timeout_seconds,
        )
        await self._runner.setup()
        limits = _Limits(
            s.http_header_timeout_seconds,
            ConnectionCaps(s.http_max_connections_per_peer, self._max_connections),
        )
        site = _GuardedSite(
            self._runner,
            limits,
            host.strip("[]"),
            int(port),
            ssl_context=ssl_context,
            backlog=256,
            # --reuse-port (and so every child of --processes) shares the HTTP port too.
            reuse_port=s.reuse_port or None,
        )
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            self._runner = None
            raise SettingsError(
                f"cannot listen on {s.http_listen} for HTTP: {exc.strerror or exc} (choose "
                "another address with --http-listen, UNS_HTTP_LISTEN)"
            ) from exc
        server = site._server  # the bound port, when HOST:0 asked for any
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else int(port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
