"""The loopback HTTP receiver itself: framing, keep-alive, scripting, waiting on signals."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx

from tests.support.http_receiver import HttpReceiver, RecordedRequest, Reply


async def _chunks() -> AsyncIterator[bytes]:
    yield b"hello "
    yield b"world"


async def test_records_requests_and_serves_script_then_responder_then_default() -> None:
    async with HttpReceiver() as rx, httpx.AsyncClient(trust_env=False) as client:
        rx.script(Reply.json({"n": 1}, status=201, headers={"X-A": "b"}))
        rx.default = Reply.text("default")
        first = await client.post(rx.url("/a?q=1"), content=b"one", headers={"X-Test": "yes"})
        assert (first.status_code, first.json(), first.headers["x-a"]) == (201, {"n": 1}, "b")
        assert (await client.post(rx.url("/b"), content=_chunks())).text == "default"
        rx.responder = lambda request: Reply.text(request.path)
        assert (await client.get(rx.url("/c"))).text == "/c"
        a, b, c = rx.requests
        assert (a.method, a.path, a.headers["x-test"], a.body) == ("POST", "/a?q=1", "yes", b"one")
        assert b.body == b"hello world" and b.headers["transfer-encoding"] == "chunked"
        assert c.method == "GET" and c.body == b""


async def test_wait_for_requests_is_signalled() -> None:
    async with HttpReceiver() as rx, httpx.AsyncClient(trust_env=False) as client:
        waiter = asyncio.create_task(rx.wait_for_requests(2))
        await client.post(rx.url("/1"), content=b"")
        await client.post(rx.url("/2"), content=b"")
        requests: list[RecordedRequest] = await waiter
        assert [r.path for r in requests] == ["/1", "/2"]


async def test_stop_ends_hanging_and_delayed_handlers_promptly() -> None:
    rx = HttpReceiver()
    await rx.start()
    async with httpx.AsyncClient(trust_env=False, timeout=5.0) as client:
        rx.script(Reply(action="hang"), Reply(delay_seconds=30))
        hung = asyncio.create_task(client.post(rx.url("/hang"), content=b""))
        delayed = asyncio.create_task(client.post(rx.url("/delay"), content=b""))
        await rx.wait_for_requests(2)
        async with asyncio.timeout(2):
            await rx.stop()
            results = await asyncio.gather(hung, delayed, return_exceptions=True)
        assert all(isinstance(r, httpx.TransportError) for r in results)
