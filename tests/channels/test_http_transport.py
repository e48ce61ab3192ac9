"""The shared HTTP client against a real socket (``channels.http_transport``): an idle
keep-alive connection is reused, one its peer closed is not, and no cookie is kept."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from tests.support.http_receiver import HttpReceiver, Reply
from uns_server.channels._http import HttpReply, post
from uns_server.channels.http_transport import OutboundClient
from uns_server.channels.registry import default_http_client

_OK = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")


class Provider:
    """Answers every request 200; with ``close_after_reply`` it then closes the
    connection without saying so (no ``Connection: close``), as providers' load
    balancers do with idle connections."""

    def __init__(self, *, close_after_reply: bool) -> None:
        self.close_after_reply = close_after_reply
        self.connections = 0
        self.closed = asyncio.Event()
        self.port = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.lower().split(b"\r\n")
                    if line.startswith(b"content-length:")
                )
                await reader.readexactly(length)
                writer.write(_OK)
                await writer.drain()
                if self.close_after_reply:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()
        self.closed.set()


@pytest.fixture(autouse=True)
def no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:  # loopback must not go through a proxy
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


async def status_of_post(client: OutboundClient, url: str) -> int:
    reply = await post(client, url, content=b"{}", headers={}, timeout_seconds=5.0)
    assert isinstance(reply, HttpReply), reply
    return reply.status


@asynccontextmanager
async def serving(provider: Provider) -> AsyncIterator[str]:
    server = await asyncio.start_server(provider.serve, "127.0.0.1", 0)
    provider.port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{provider.port}/hook"
    finally:
        server.close()


async def test_an_idle_connection_is_reused() -> None:
    provider = Provider(close_after_reply=False)
    async with serving(provider) as url, default_http_client() as client:
        for _ in range(3):
            assert await status_of_post(client, url) == 200
            await asyncio.sleep(0.05)  # idle between requests, as between deliveries
    assert provider.connections == 1


async def test_a_connection_the_provider_closed_is_not_reused() -> None:
    provider = Provider(close_after_reply=True)
    async with serving(provider) as url, default_http_client() as client:
        assert await status_of_post(client, url) == 200
        await provider.closed.wait()
        await asyncio.sleep(0.05)  # the FIN reaches the client's socket
        # Reusing the closed connection would fail: "Server disconnected".
        assert await status_of_post(client, url) == 200
    assert provider.connections == 2


# aiohttp's default jar ignores a reply's cookie from an IP host, so "localhost" is
# where the reply's cookie counts; the one set on the session goes to any host.
@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
async def test_a_cookie_a_provider_sets_is_never_sent_back(host: str) -> None:
    """One client serves every tenant's channels: no provider state may ride along."""
    async with HttpReceiver() as rx, default_http_client() as client:
        rx.default = Reply(headers={"set-cookie": "session=tenant-a; Path=/"})
        # Not kept either when set on the session directly.
        client.session().cookie_jar.update_cookies({"set": "on-the-client"})
        url = f"http://{host}:{rx.port}/hook"
        for _ in range(3):
            assert await status_of_post(client, url) == 200
    assert len(rx.requests) == 3
    assert [r.headers.get("cookie") for r in rx.requests] == [None, None, None]


async def test_a_proxy_set_in_the_environment_carries_the_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with HttpReceiver() as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url("").rstrip("/"))
        for name in ("NO_PROXY", "no_proxy"):
            monkeypatch.delenv(name, raising=False)
        async with default_http_client() as client:
            assert await status_of_post(client, "http://provider.invalid/hook") == 200
    assert [r.path for r in proxy.requests] == ["http://provider.invalid/hook"]
    assert proxy.requests[0].headers["host"] == "provider.invalid"
