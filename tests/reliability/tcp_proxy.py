"""A small asyncio TCP proxy for injecting network faults between a server and PostgreSQL.

``reset()`` aborts every proxied connection with an RST (both sides see a dropped
connection, new ones are accepted). ``blackhole()`` keeps every connection open but
silently discards all bytes in both directions, and accepts new connections without
ever reaching the upstream: a partition that neither side can detect by itself.
``heal()`` ends the partition: the blackholed connections are reset (their streams are
corrupt anyway) and new connections flow again.

``blackhole_after(marker)`` arms a precise partition: the next client-to-server chunk
containing ``marker`` is still forwarded, then everything goes silent. With a marker from
a statement's parameters it freezes a session right after that statement ran, inside
its transaction (e.g. after ``pg_notify('uns_events')``, which the server issues after
appending events under the event-order lock and just before COMMIT).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct


class TcpProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self.blackholed = False
        self.accepted = 0
        self._marker: bytes | None = None
        self.triggered = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter | None]] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def connections(self) -> int:
        return len(self._pairs)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self.reset()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await self._server.wait_closed()
            self._server = None

    def reset(self) -> int:
        """RST every current connection; returns how many were cut."""
        pairs = list(self._pairs)
        for client, upstream in pairs:
            _abort(client)
            if upstream is not None:
                _abort(upstream)
        self._pairs.clear()
        return len(pairs)

    def blackhole(self) -> None:
        self.blackholed = True
        self.triggered.set()

    def blackhole_after(self, marker: bytes) -> None:
        self._marker = marker

    def heal(self) -> None:
        self._marker = None
        self.reset()
        self.blackholed = False

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        self.accepted += 1
        if self.blackholed:
            pair: tuple[asyncio.StreamWriter, asyncio.StreamWriter | None] = (writer, None)
            self._pairs.add(pair)
            try:
                while await reader.read(65536):
                    pass  # swallowed
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                self._pairs.discard(pair)
                _abort(writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            _abort(writer)
            return
        pair = (writer, up_writer)
        self._pairs.add(pair)
        try:
            await asyncio.gather(
                self._pump(reader, up_writer, pair, upstream=True),
                self._pump(up_reader, writer, pair),
            )
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            if not self.blackholed:
                self._pairs.discard(pair)
                _abort(writer)
                _abort(up_writer)
            # else: both sockets stay open, silent, until heal() resets them

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        pair: tuple[asyncio.StreamWriter, asyncio.StreamWriter | None],
        *,
        upstream: bool = False,
    ) -> None:
        try:
            while data := await reader.read(65536):
                if self.blackholed:
                    continue  # the partition: bytes vanish, nobody is told
                writer.write(data)
                await writer.drain()
                if upstream and self._marker is not None and self._marker in data:
                    self._marker = None
                    self.blackhole()
        except (ConnectionError, OSError):
            pass
        finally:
            # One side ended: end the other (unless a reset already did). Inside a
            # partition the close is lost like everything else: the peer never learns.
            if pair in self._pairs and not self.blackholed:
                with contextlib.suppress(Exception):
                    writer.close()


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close with RST (SO_LINGER 0), not FIN: the peer sees a reset connection."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(Exception):
        writer.transport.abort()
