"""The HTTP surface: served by the same process, bounded per request, TLS like gRPC."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import httpx
import pytest
from aiohttp import web

from tests.support.certs import TestCA
from tests.support.server import start_server
from uns_server.http.server import HttpServer
from uns_server.settings import Settings, SettingsError


async def test_liveness_and_readiness_from_the_server_process(db_url: str, tmp_path: Path) -> None:
    running = await start_server(db_url, tmp_path, http_listen="127.0.0.1:0")
    try:
        app = running.app
        assert app.http_port > 0
        assert app.public_url == f"http://127.0.0.1:{app.http_port}"
        async with httpx.AsyncClient(base_url=app.public_url) as http:
            live = await http.get("/healthz")
            ready = await http.get("/readyz")
            missing = await http.get("/nothing-here")
        assert (live.status_code, live.text) == (200, "ok\n")
        assert (ready.status_code, ready.text) == (200, "ready\n")
        assert missing.status_code == 404
        for response in (live, missing):
            assert response.headers["cache-control"] == "no-store"
            assert response.headers["referrer-policy"] == "same-origin"
            assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
    finally:
        await running.stop()


async def _serve(settings: Settings, routes: list[web.RouteDef]) -> HttpServer:
    server = HttpServer(settings, routes)
    await server.start()
    return server


async def test_bodies_past_the_limit_and_slow_handlers_are_cut_off() -> None:
    async def echo(request: web.Request) -> web.Response:
        return web.Response(text=str(len(await request.read())))

    async def stall(_request: web.Request) -> web.Response:
        await asyncio.sleep(30)
        return web.Response(text="late")

    settings = Settings(
        http_listen="127.0.0.1:0", http_max_body_bytes=1000, http_request_timeout_seconds=0.3
    )
    server = await _serve(settings, [web.post("/echo", echo), web.get("/stall", stall)])
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as http:
            small = await http.post("/echo", content=b"x" * 1000)
            big = await http.post("/echo", content=b"x" * 1001)
            slow = await http.get("/stall")
        assert (small.status_code, small.text) == (200, "1000")
        assert big.status_code == 413
        assert slow.status_code == 503
    finally:
        await server.stop()


async def test_tls_uses_the_grpc_certificate(tmp_path: Path) -> None:
    ca = TestCA(tmp_path)
    issued = ca.issue("server", "localhost", server=True)
    settings = Settings(
        http_listen="127.0.0.1:0", tls_cert_file=str(issued.cert), tls_key_file=str(issued.key)
    )

    async def hello(_request: web.Request) -> web.Response:
        return web.Response(text="hi")

    server = await _serve(settings, [web.get("/", hello)])
    try:
        assert settings.base_url == "https://127.0.0.1:0"
        verify = ssl.create_default_context(cafile=str(ca.cert))
        async with httpx.AsyncClient(verify=verify) as http:
            answer = await http.get(f"https://127.0.0.1:{server.port}/")
        assert answer.text == "hi"
        async with httpx.AsyncClient() as http:
            with pytest.raises(httpx.HTTPError):  # plain HTTP is not answered as HTTP
                await http.get(f"http://127.0.0.1:{server.port}/", timeout=2)
    finally:
        await server.stop()


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        ({"http_listen": "8080"}, "http_listen must be HOST:PORT"),
        ({"http_listen": "127.0.0.1:8080", "public_url": "ftp://x"}, "public_url"),
        ({"http_listen": "127.0.0.1:8080", "action_link_keys": "short"}, "at least 32"),
        ({"http_listen": "0.0.0.0:8080", "allow_insecure": True}, "--action-link-keys"),
        ({"http_listen": "0.0.0.0:8080", "action_link_keys": "k" * 32}, "without TLS"),
    ],
)
def test_settings_refuse_an_unsafe_http_surface(overrides: dict[str, object], problem: str) -> None:
    with pytest.raises(SettingsError, match=problem):
        Settings.from_env({}, **overrides)


def test_public_url_defaults_to_the_http_address() -> None:
    assert Settings.from_env({}, http_listen="127.0.0.1:8080").base_url == "http://127.0.0.1:8080"
    custom = Settings.from_env(
        {"UNS_PUBLIC_URL": "https://uns.example.com/"}, http_listen="127.0.0.1:8080"
    )
    assert custom.base_url == "https://uns.example.com"
