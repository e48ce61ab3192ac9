"""The gRPC port's front: accepts client connections, counts them per peer address and
server-wide (``services.connection_caps``), and relays each one it keeps, byte for byte,
to the gRPC server on a private unix socket.

Why a front at all: grpc.aio accepts sockets itself and gives no hook per connection
(no peer address before a call, no way to refuse one; ``grpc.max_allowed_incoming_connections``
is one server-wide count, so one address could still take every slot). The relay is
transport only: TLS, HTTP/2 and every gRPC limit (handshake and idle timeouts, keepalive)
stay gRPC's, applied on the private socket. What it costs: two more descriptors per
connection and one extra copy of every byte in this process (docs/deployment.md,
"Connections and file descriptors", gives the measurement);
``grpc_max_connections_per_peer: 0`` turns it off and gRPC listens on the port itself.

The relay's unix client socket is bound to an abstract name that carries the client's
address (``uns-front/<pid>/<n>/ipv4:10.0.0.1``), so gRPC's ``context.peer()`` still names
the client (``client_address``) and admission charges failed key lookups to it.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
from typing import Any

from uns_server.services.connection_caps import ConnectionCaps, RefusalLog

log = logging.getLogger("uns.grpc")

ABSTRACT_PREFIX = "uns-front/"
PEER_PREFIX = "unix-abstract:" + ABSTRACT_PREFIX
# One count per process, not per front: abstract names are process-wide, and two fronts
# in one process (tests, a restart in place) would otherwise bind the same name.
_SERIAL = itertools.count()


def client_address(peer: str) -> str | None:
    """The client address a relayed connection's gRPC peer carries, else None."""
    if not peer.startswith(PEER_PREFIX):
        return None
    return peer[len(PEER_PREFIX) :].split("/", 2)[-1]


def _address(transport: asyncio.BaseTransport) -> str:
    """``ipv4:10.0.0.1`` or ``ipv6:[::1]``, as gRPC names a peer (without its port)."""
    name = transport.get_extra_info("peername")
    if not isinstance(name, tuple) or not name:
        return "unknown"
    host = str(name[0])
    return f"ipv6:[{host}]" if ":" in host else f"ipv4:{host}"


class _Upstream(asyncio.Protocol):
    """The relay's connection to gRPC: what gRPC sends goes to the client."""

    def __init__(self, client: _Client) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.client.send(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.close()

    def pause_writing(self) -> None:  # gRPC reads slower than the client sends
        self.client.pause_reading()

    def resume_writing(self) -> None:
        self.client.resume_reading()


class _Client(asyncio.Protocol):
    """One client connection on the public port."""

    def __init__(self, front: GrpcFront) -> None:
        self.front = front
        self.transport: asyncio.Transport | None = None
        self.upstream: _Upstream | None = None
        self.peer: str | None = None  # set while counted

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = _address(transport)
        refusal = self.front.caps.admit(peer)
        if refusal is not None:
            transport.abort()  # the descriptor is free again at once
            self.front.refused(refusal, peer)
            return
        self.peer = peer
        self.front.connections.add(self)
        transport.pause_reading()  # until the relay is connected (microseconds)
        self.front.spawn(self._connect(peer))

    async def _connect(self, peer: str) -> None:
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind("\0" + ABSTRACT_PREFIX + f"{os.getpid()}/{next(_SERIAL)}/{peer}")
            sock.setblocking(False)
            await loop.sock_connect(sock, self.front.target)
            _, upstream = await loop.create_unix_connection(lambda: _Upstream(self), sock=sock)
        except OSError as exc:
            sock.close()
            self.front.refused("relay", peer, f"{exc.strerror or exc}")
            self.close()
            return
        except BaseException:  # cancelled by ``stop``
            sock.close()
            raise
        self.upstream = upstream
        if self.peer is None:  # the client left meanwhile
            self.close()
            return
        self.resume_reading()

    def data_received(self, data: bytes) -> None:
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.write(data)

    def send(self, data: bytes) -> None:
        if self.transport is not None:
            self.transport.write(data)

    def pause_reading(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def pause_writing(self) -> None:  # the client reads slower than gRPC sends
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.resume_reading()

    def eof_received(self) -> bool:
        return False  # a half-closed client is closed (gRPC never half-closes)

    def connection_lost(self, exc: Exception | None) -> None:
        self.close()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.close()
        if self.peer is not None:
            self.front.caps.release(self.peer)
            self.front.connections.discard(self)
            self.peer = None


class GrpcFront:
    """Listens on the public gRPC address; relays to ``target`` (a unix socket path)."""

    def __init__(self, target: str, caps: ConnectionCaps) -> None:
        self.target = target
        self.caps = caps
        self.connections: set[_Client] = set()
        self._refusals = RefusalLog(log)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def refused(self, refusal: str, peer: str, error: str = "") -> None:
        if refusal == "relay":
            message = f"grpc connections closed: the relay could not reach gRPC ({error})"
        else:
            message = f"grpc connections refused: {self.caps.refusal(refusal)}"
        self._refusals.refused(refusal, message, peer)

    async def start(self, host: str, port: int, *, reuse_port: bool) -> int:
        """Listens (raises OSError when it cannot); the bound port."""
        self._server = await asyncio.get_running_loop().create_server(
            lambda: _Client(self),
            host or None,
            port,
            backlog=1024,
            reuse_address=True,
            reuse_port=reuse_port or None,
        )
        return int(self._server.sockets[0].getsockname()[1])

    def stop_accepting(self) -> None:
        """Shutdown begins: no new connection; the open ones drain through gRPC."""
        if self._server is not None:
            self._server.close()

    async def stop(self) -> None:
        """Closes every open connection (once gRPC has drained them)."""
        self.stop_accepting()
        for client in list(self.connections):
            client.close()
        for task in list(self._tasks):
            task.cancel()
