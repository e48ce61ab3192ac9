"""A real loopback HTTP/1.1 server for tests: records requests, answers as scripted.

Adapters are tested against a socket, not a mock, so timeouts, refused connections,
dropped connections and odd bodies are the real thing. Runs on the caller's event loop::

    async with HttpReceiver() as rx:
        rx.script(Reply(status=503), Reply.json({"ok": True, "ts": "1.2"}))
        ...  # point a client at rx.url("/hook")
        request = rx.requests[0]

Each request takes the next scripted :class:`Reply` (FIFO), then ``rx.default``; or set
``rx.responder`` to compute replies. A reply can delay, ``hang`` (never answer) or
``close`` the connection without answering. Keep-alive is supported; bodies are read by
Content-Length or chunked encoding.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Literal

Action = Literal["respond", "hang", "close", "garbage"]
MAX_BODY_BYTES = 10 * 1024 * 1024


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: Mapping[str, str]  # lower-cased names
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    delay_seconds: float = 0.0
    action: Action = "respond"

    @classmethod
    def json(cls, value: Any, status: int = 200, **kwargs: Any) -> Reply:
        headers = {"content-type": "application/json", **kwargs.pop("headers", {})}
        return cls(status=status, body=json.dumps(value).encode(), headers=headers, **kwargs)

    @classmethod
    def text(cls, value: str, status: int = 200, **kwargs: Any) -> Reply:
        headers = {"content-type": "text/plain; charset=utf-8", **kwargs.pop("headers", {})}
        return cls(status=status, body=value.encode(), headers=headers, **kwargs)


def unused_tcp_port() -> int:
    """A port nothing listens on (bound and released), for connection-refused cases."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class HttpReceiver:
    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.port = 0
        self.requests: list[RecordedRequest] = []
        self.default = Reply()
        self.responder: Callable[[RecordedRequest], Reply] | None = None
        self._script: list[Reply] = []
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._arrived = asyncio.Condition()
        self._stopping = asyncio.Event()

    def url(self, path: str = "/") -> str:
        return f"http://{self.host}:{self.port}{path}"

    def script(self, *replies: Reply) -> None:
        """Queue replies for the next requests, in order."""
        self._script.extend(replies)

    async def wait_for_requests(
        self, count: int, within_seconds: float = 5.0
    ) -> list[RecordedRequest]:
        """Wait until ``count`` requests have been recorded (a signal, not a sleep)."""
        async with asyncio.timeout(within_seconds), self._arrived:
            await self._arrived.wait_for(lambda: len(self.requests) >= count)
        return self.requests[:count]

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._stopping.set()
            self._server.close()
            for writer in list(self._writers):
                writer.close()
            if self._tasks:  # closed transports end idle and hanging handlers promptly
                _done, pending = await asyncio.wait(set(self._tasks), timeout=5.0)
                for task in pending:
                    task.cancel()
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> HttpReceiver:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _next_reply(self, request: RecordedRequest) -> Reply:
        if self._script:
            return self._script.pop(0)
        if self.responder is not None:
            return self.responder(request)
        return self.default

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        self._writers.add(writer)
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    return
                reply = self._next_reply(request)
                async with self._arrived:
                    self.requests.append(request)
                    self._arrived.notify_all()
                if reply.delay_seconds:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(reply.delay_seconds):
                            await self._stopping.wait()
                    if self._stopping.is_set():
                        return
                if reply.action == "close":
                    return
                if reply.action == "hang":
                    await reader.read()  # until the client gives up or the server stops
                    return
                if reply.action == "garbage":  # bytes that are not an HTTP response
                    writer.write(b"\x00\x01 not http at all\r\n\r\n")
                    await writer.drain()
                    return
                writer.write(_encode_reply(reply))
                await writer.drain()
                if request.headers.get("connection", "").lower() == "close":
                    return
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            return
        except asyncio.CancelledError:
            # Python 3.11's stream callback logs a cancelled handler task as an error;
            # a handler ended by teardown is not one.
            return
        finally:
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


async def _read_request(reader: asyncio.StreamReader) -> RecordedRequest | None:
    line = await reader.readline()
    if not line.strip():
        return None
    method, target, _version = line.decode("latin-1").split(" ", 2)
    headers: dict[str, str] = {}
    while True:
        raw = await reader.readline()
        if raw in (b"\r\n", b"\n", b""):
            break
        name, _, value = raw.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = await _read_chunked(reader)
    else:
        length = int(headers.get("content-length", "0"))
        if length > MAX_BODY_BYTES:
            raise ValueError("request body too large")
        body = await reader.readexactly(length)
    return RecordedRequest(method, target, headers, body)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    body = bytearray()
    while True:
        size = int((await reader.readline()).split(b";")[0].strip(), 16)
        if size == 0:
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass
            return bytes(body)
        body.extend(await reader.readexactly(size))
        await reader.readexactly(2)
        if len(body) > MAX_BODY_BYTES:
            raise ValueError("request body too large")


def _encode_reply(reply: Reply) -> bytes:
    try:
        reason = HTTPStatus(reply.status).phrase
    except ValueError:
        reason = "Unknown"
    headers = {k.lower(): v for k, v in reply.headers.items()}
    headers.setdefault("content-length", str(len(reply.body)))
    head = f"HTTP/1.1 {reply.status} {reason}\r\n" + "".join(
        f"{name}: {value}\r\n" for name, value in headers.items()
    )
    return head.encode("latin-1") + b"\r\n" + reply.body
