"""The loopback webhook receiver: answers 200 at once, verifies, notes when each arrived.

Lean on purpose (it shares the benchmark's event loop with the load generator): it
keeps only arrival times keyed by the notification's ``correlation_id``, which the
producers set to a unique value, and the count of requests whose Standard-Webhooks
signature did not verify.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import time

from uns_server.channels.webhook import signing_key

_OK = b'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{"ok":true}'


class WebhookReceiver:
    def __init__(self, secret: str) -> None:
        self._key = signing_key(secret)
        self.arrivals: dict[str, float] = {}  # correlation_id -> perf_counter at arrival
        self._order: list[str] = []  # the keys of ``arrivals``, in arrival order
        self.requests = 0
        self.connections = 0  # opened: a client that keeps its connections alive opens few
        self.bad_signatures = 0
        self.port = 0
        self._server: asyncio.Server | None = None
        self._changed = asyncio.Event()
        self._writers: set[asyncio.StreamWriter] = set()

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, backlog=512)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for writer in list(self._writers):
                writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
            self._server = None

    async def wait_for(self, prefix: str, expected: int, limit_seconds: float) -> int:
        """Wait until ``expected`` arrivals carry ``prefix`` (or time runs out).

        Counts only the arrivals since its last look: recounting all of them on every
        wake-up had kept the load generator busy for a whole core once a drain passed
        ~50k arrivals, on the cores the server needs."""
        deadline = time.monotonic() + limit_seconds
        seen = looked = 0
        while True:
            new = self._order[looked:]
            seen += sum(1 for k in new if k.startswith(prefix))
            looked += len(new)
            remaining = deadline - time.monotonic()
            if seen >= expected or remaining <= 0:
                return seen
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(remaining, 0.5))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                arrived = time.perf_counter()
                headers: dict[str, str] = {}
                for line in head.decode("latin-1").split("\r\n")[1:]:
                    name, _, value = line.partition(":")
                    if name:
                        headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                writer.write(_OK)
                self._record(headers, body, arrived)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    def _record(self, headers: dict[str, str], body: bytes, arrived: float) -> None:
        self.requests += 1
        msg_id = headers.get("webhook-id", "")
        signed = f"{msg_id}.{headers.get('webhook-timestamp', '')}.".encode() + body
        expected = base64.b64encode(hmac.new(self._key, signed, hashlib.sha256).digest())
        offered = [s.partition(",")[2] for s in headers.get("webhook-signature", "").split()]
        if expected.decode() not in offered:
            self.bad_signatures += 1
        try:
            correlation = json.loads(body)["data"]["correlation_id"]
        except (ValueError, KeyError, TypeError):
            return
        if isinstance(correlation, str) and correlation not in self.arrivals:
            self.arrivals[correlation] = arrived  # retries keep the first arrival
            self._order.append(correlation)
        self._changed.set()
