"""Liveness and readiness over HTTP, for probes that speak no gRPC."""

from __future__ import annotations

import asyncio

from aiohttp import web


def routes(ready: asyncio.Event) -> list[web.RouteDef]:
    async def healthz(_request: web.Request) -> web.Response:
        """Live: the process answers (it says nothing about the database)."""
        return web.Response(text="ok\n")

    async def readyz(_request: web.Request) -> web.Response:
        """Ready: the database is reachable and migrated (as gRPC health SERVING)."""
        if ready.is_set():
            return web.Response(text="ready\n")
        return web.Response(status=503, text="not ready\n")

    return [web.get("/healthz", healthz), web.get("/readyz", readyz)]
