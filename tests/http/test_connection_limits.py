"""The HTTP listener bounds its connections: request headers that never end, an idle
keep-alive connection and connections past the peer's cap are closed, so a slow or
greedy client cannot hold the process's file descriptors (shared with gRPC)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.support.server import RunningServer, start_server

SQLITE = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)


@pytest.fixture
async def bounded(db_url: str, tmp_path: Path) -> AsyncIterator[RunningServer]:
    server = await start_server(
        db_url,
        tmp_path,
        http_listen="127.0.0.1:0",
        http_header_timeout_seconds=0.3,
        http_keepalive_timeout_seconds=0.3,
    )
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def capped(db_url: str, tmp_path: Path) -> AsyncIterator[RunningServer]:
    server = await start_server(
        db_url,
        tmp_path,
        http_listen="127.0.0.1:0",
        http_header_timeout_seconds=600,  # the held connections stay open
        http_max_connections_per_peer=3,
    )
    try:
        yield server
    finally:
        await server.stop()


async def _connect(server: RunningServer) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    url = urlsplit(server.app.public_url)
    return await asyncio.open_connection(url.hostname, url.port)


async def _closed_by_server(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sent until it closed the connection."""
    return await asyncio.wait_for(reader.read(), 30)


@SQLITE
async def test_a_connection_whose_headers_never_end_is_closed(bounded: RunningServer) -> None:
    reader, writer = await _connect(bounded)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: uns\r\nX-Slow: ")  # and nothing more
    await writer.drain()
    assert await _closed_by_server(reader) == b""  # closed, no request was handled
    writer.close()


@SQLITE
async def test_an_idle_keep_alive_connection_is_closed(bounded: RunningServer) -> None:
    reader, writer = await _connect(bounded)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: uns\r\n\r\n")
    await writer.drain()
    answered = await _closed_by_server(reader)
    assert answered.startswith(b"HTTP/1.1 ")  # answered, then closed when idle
    writer.close()


@SQLITE
async def test_a_peer_past_its_connection_cap_is_refused(capped: RunningServer) -> None:
    held = [await _connect(capped) for _ in range(3)]
    reader, writer = await _connect(capped)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: uns\r\nConnection: close\r\n\r\n")
    await writer.drain()
    assert await _closed_by_server(reader) == b""  # closed unanswered
    writer.close()
    for _, w in held:
        w.close()
    answered = b""
    for _ in range(200):  # the cap counts open connections only: once the server has
        reader, writer = await _connect(capped)  # seen the others close, it answers
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: uns\r\nConnection: close\r\n\r\n")
        await writer.drain()
        answered = await _closed_by_server(reader)
        writer.close()
        if answered:
            break
        await asyncio.sleep(0.05)
    assert answered.startswith(b"HTTP/1.1 ")
