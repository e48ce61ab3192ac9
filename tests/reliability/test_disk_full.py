"""A real full disk under a running uns-server (SQLite), without root: the server runs
in a user and mount namespace of its own (``unshare --user --map-root-user --mount``)
with its database on a small tmpfs mounted there. The test fills that filesystem
with a ballast file (through ``/proc/PID/root``), then deletes it.

What must show: writes answer RESOURCE_EXHAUSTED / STORAGE_FULL, the log names the
file and the space left, health is NOT_SERVING while the disk is full, and SERVING
again, with sends accepted, once space is freed: no restart.
"""

from __future__ import annotations

import asyncio
import errno
import shutil
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2

from tests.reliability.harness import metadata
from tests.support.grpc_errors import rich_error
from tests.support.process import ServerProcess
from tests.support.server import send_request, write_key_file
from uns.v1 import notification_service_pb2_grpc as pb_grpc

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
DISK_BYTES = 32 * 1024 * 1024  # above the server's 8 MiB "room again" mark once emptied
WITHIN_SECONDS = 60.0


def _namespaces_allowed(directory: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        [
            "unshare",
            "--user",
            "--map-root-user",
            "--mount",
            "sh",
            "-c",
            f'mount -t tmpfs -o size=64k tmpfs "{directory}"',
        ],
        capture_output=True,
        timeout=30,
    )
    return probe.returncode == 0


def _fill(directory: Path) -> Path:
    """Write a ballast file until the filesystem refuses (ENOSPC)."""
    ballast = directory / "ballast"
    chunk = b"\0" * (256 * 1024)
    with ballast.open("wb", buffering=0) as f:
        while True:
            try:
                f.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                break
    for size in (4096, 512, 1):  # the last partial blocks too
        with ballast.open("ab", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    return ballast


async def _wait_health(server: ServerProcess, status: int) -> None:
    deadline = time.monotonic() + WITHIN_SECONDS
    while await asyncio.to_thread(server.health) != status:
        assert time.monotonic() < deadline, f"health never became {status}:\n{server.output()}"
        await asyncio.sleep(0.2)


async def test_a_real_full_disk_is_storage_full_and_recovers_once_space_is_freed(
    tmp_path: Path,
) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    if not _namespaces_allowed(disk):
        pytest.skip("unprivileged user and mount namespaces are not allowed here")
    database = disk / "uns.db"
    script = (
        f'mount -t tmpfs -o size={DISK_BYTES} tmpfs "$0" && exec "{sys.executable}" -c '
        '"from uns_server.cli.server import main; main()" "$@"'
    )
    server = ServerProcess(
        tmp_path,
        "--database-url",
        f"sqlite+aiosqlite:///{database}",
        "--api-keys-file",
        str(write_key_file(tmp_path)),
        "--no-dispatch-enabled",
        "--log-format",
        "text",
        "--rate-limit-per-second",
        "0",
        program=["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script, str(disk)],
    )
    try:
        await asyncio.to_thread(server.wait_serving)
        seen = Path(f"/proc/{server.proc.pid}/root") / disk.relative_to("/")
        assert (seen / "uns.db").exists()  # the server's tmpfs, as the test sees it
        async with grpc.aio.insecure_channel(server.target) as channel:
            stub = pb_grpc.NotificationServiceStub(channel)
            alice = metadata("alice")
            await stub.SendNotification(send_request(idempotency_key="before"), metadata=alice)
            ballast = await asyncio.to_thread(_fill, seen)
            big = {"blob": "x" * 8000}
            refused = None
            for i in range(2000):  # pages and WAL space SQLite already holds go first
                try:
                    await stub.SendNotification(
                        send_request(idempotency_key=f"fill-{i}", metadata=big), metadata=alice
                    )
                except grpc.aio.AioRpcError as exc:
                    refused = rich_error(exc)
                    break
            assert refused is not None, "the full disk never refused a write"
            assert (refused.code, refused.reason) == (
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                "STORAGE_FULL",
            ), server.output()
            await _wait_health(server, NOT_SERVING)
            [line] = [x for x in server.output().splitlines() if "database storage is full" in x]
            assert str(database) in line and "free of" in line, line

            ballast.unlink()  # space freed
            await _wait_health(server, SERVING)
            sent = await stub.SendNotification(
                send_request(idempotency_key="after", metadata=big), metadata=alice
            )
            assert sent.notification_id
            assert "database storage has room again" in server.output()
    finally:
        server.stop()
