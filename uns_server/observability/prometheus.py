"""The Prometheus scrape endpoint (``metrics_listen``), served from a prometheus_client
thread; collection reads only in-memory values (``observability.metrics``)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer


class PrometheusEndpoint:
    """``GET /metrics`` (any path, in fact) on ``host:port`` from a prometheus_client
    thread; collection reads only in-memory values (see the module doc)."""

    def __init__(self, registry: CollectorRegistry, listen: str) -> None:
        self._registry = registry
        self._listen = listen
        self._server: WSGIServer | None = None
        self.port = 0

    def start(self) -> int:
        from prometheus_client import start_http_server

        host, _, port = self._listen.rpartition(":")
        self._server, _thread = start_http_server(
            int(port), addr=host.strip("[]"), registry=self._registry
        )
        self.port = int(self._server.server_port)
        return self.port

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            await asyncio.to_thread(server.shutdown)  # waits for serve_forever's poll
            server.server_close()
