"""A connection flood from one address cannot take the server (issue 42): a bounded
flood of idle TCP connections against lowered caps, on the gRPC port and the HTTP
port, leaves health and ordinary calls from other addresses answered, the process's
descriptors bounded, and the log saying so in a line or two, not one per connection.

The flood comes from 127.0.0.2 and the ordinary client from 127.0.0.1 (Linux routes
all of 127/8 to loopback). The refusal log's period is made longer than any test run,
so its count does not depend on the machine's speed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable
from pathlib import Path

import aiohttp
import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.security.rpcs import OK, Callers
from tests.support.server import RunningServer, start_server
from uns.v1 import notification_service_pb2 as pb
from uns_server.api.admission import peer_address
from uns_server.services import connection_caps

FLOOD = 200
PER_PEER = 20
FLOODER = "127.0.0.2"


@pytest.fixture(autouse=True)
def one_refusal_line_per_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connection_caps, "REFUSAL_LOG_SECONDS", 1e9)


async def flood(port: int, count: int) -> list[socket.socket]:
    """``count`` idle connections from FLOODER that send nothing (the ones the server
    refuses are closed by it; they stay in the list, closed or not)."""
    loop = asyncio.get_running_loop()
    held = []
    for _ in range(count):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        sock.bind((FLOODER, 0))
        await loop.sock_connect(sock, ("127.0.0.1", port))
        held.append(sock)
    return held


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


async def wait_for(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(60):
        while not condition():  # noqa: ASYNC110 (the server's state, not an event)
            await asyncio.sleep(0.02)


async def serving(server: RunningServer) -> None:
    """gRPC health, an ordinary call and HTTP health, from 127.0.0.1."""
    async with grpc.aio.insecure_channel(server.target) as channel:
        health = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=30
        )
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    listed = await Callers(server)("alice").call(
        "NotificationService/ListNotifications", pb.ListNotificationsRequest(), rpc_timeout=30
    )
    assert listed.reason == OK, listed
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{server.app.http_port}/healthz") as response,
    ):
        assert response.status == 200


async def test_an_idle_connection_flood_from_one_address_is_capped(
    db_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    server = await start_server(
        db_url,
        tmp_path,
        dispatch_enabled=False,
        http_listen="127.0.0.1:0",
        grpc_max_connections_per_peer=PER_PEER,
        http_max_connections_per_peer=PER_PEER,
        http_header_timeout_seconds=600,  # the flood's HTTP connections stay open
        grpc_handshake_timeout_seconds=600,  # and so do its gRPC ones
    )
    held: list[socket.socket] = []
    try:
        before = open_descriptors()
        front = server.app.front
        assert front is not None
        held += await flood(server.app.port, FLOOD)
        held += await flood(server.app.http_port, FLOOD)
        await wait_for(lambda: front.caps.open_from(f"ipv4:{FLOODER}") == PER_PEER)
        # The refused ones are closed by the server: their descriptors are free again.
        # Each kept gRPC connection holds three (client, relay, gRPC's end), HTTP one;
        # the flood's own sockets are this process's too.
        await wait_for(lambda: open_descriptors() - before <= len(held) + PER_PEER * 4 + 10)
        await serving(server)
        lines = [r for r in caplog.records if "connections refused" in r.getMessage()]
        assert sorted(r.getMessage() for r in lines) == [
            f"grpc connections refused: peer at its cap of {PER_PEER}",
            f"http connections refused: peer at its cap of {PER_PEER}",
        ]
    finally:
        for sock in held:
            sock.close()
        await server.stop()


async def test_a_listener_at_its_server_wide_cap_refuses_more(db_url: str, tmp_path: Path) -> None:
    """Two addresses within their own caps fill the gRPC listener's server-wide cap;
    the HTTP listener (health) has its own, and answers."""
    server = await start_server(
        db_url,
        tmp_path,
        dispatch_enabled=False,
        http_listen="127.0.0.1:0",
        grpc_max_connections_per_peer=PER_PEER,
        max_connections=PER_PEER + 5,
        grpc_handshake_timeout_seconds=600,
    )
    held: list[socket.socket] = []
    try:
        front = server.app.front
        assert front is not None
        held += await flood(server.app.port, PER_PEER)
        loop = asyncio.get_running_loop()
        for _ in range(PER_PEER):  # a second address: only five fit
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            sock.bind(("127.0.0.3", 0))
            await loop.sock_connect(sock, ("127.0.0.1", server.app.port))
            held.append(sock)
        await wait_for(lambda: front.caps.open_from("ipv4:127.0.0.3") == 5)
        assert front.caps.open_total == PER_PEER + 5
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{server.app.http_port}/healthz") as response,
        ):
            assert response.status == 200
        for sock in held[:PER_PEER]:  # the first address leaves: the others get in
            sock.close()
        await wait_for(lambda: front.caps.open_total == 5)
        async with grpc.aio.insecure_channel(server.target) as channel:
            health = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=30
            )
        assert health.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        for sock in held:
            sock.close()
        await server.stop()


def test_a_relayed_connection_is_charged_to_its_clients_address() -> None:
    """gRPC sees the front's unix socket; admission (failed key lookups per address)
    reads the client's address from its abstract name."""
    assert peer_address("unix-abstract:uns-front/41/7/ipv4:10.0.0.1") == "ipv4:10.0.0.1"
    assert peer_address("unix-abstract:uns-front/41/8/ipv6:[2001:db8::1]") == "ipv6:[2001:db8::1]"
    assert peer_address("ipv4:10.0.0.1:5000") == "ipv4:10.0.0.1"
