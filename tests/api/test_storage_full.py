"""A full disk is its own fault (issue 42): writes answer RESOURCE_EXHAUSTED with
reason STORAGE_FULL (not "the database is unreachable"), the log names the file and
the space its filesystem has left, health is NOT_SERVING while writes fail, and all
of it ends without a restart once space is freed.

The SQLite database is made full for real: ``PRAGMA max_page_count`` on the server's
own writer connection caps the file at its current size, and SQLite refuses the next
page with SQLITE_FULL (13), the code it answers for a disk out of space (its
``unixWrite`` maps ENOSPC, and only ENOSPC, to SQLITE_FULL). A real full filesystem,
under a server process in namespaces of its own, is ``tests/reliability/test_disk_full.py``.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from sqlalchemy.exc import OperationalError

from tests.support.grpc_errors import rich_error
from tests.support.server import RunningServer, send_request, start_server
from uns_server.store.space import is_storage_full

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
WITHIN_SECONDS = 60.0


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    running = await start_server(
        f"sqlite+aiosqlite:///{tmp_path / 'uns.db'}", tmp_path, dispatch_enabled=False
    )
    try:
        yield running
    finally:
        await running.stop()


async def wait_health(target: str, expected: int) -> None:
    deadline = time.monotonic() + WITHIN_SECONDS
    async with grpc.aio.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while (await stub.Check(health_pb2.HealthCheckRequest(), timeout=5)).status != expected:
            assert time.monotonic() < deadline, f"health never became {expected}"
            await asyncio.sleep(0.1)


async def cap_pages(server: RunningServer, pages: int) -> None:
    """``PRAGMA max_page_count`` on the server's one writer connection (it is kept
    for the server's life; SQLite never lowers the cap below the file's size)."""
    async with server.app.db.write() as tx:
        await tx.conn.exec_driver_sql(f"PRAGMA max_page_count = {pages}")


async def test_a_full_database_is_storage_full_not_serving_and_recovers_without_restart(
    server: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    alice = server.stub("alice")
    await alice.SendNotification(send_request(idempotency_key="before"))
    await wait_health(server.target, SERVING)
    await cap_pages(server, 1)  # no room to grow from here
    big = {"blob": "x" * 8000}
    refused = None
    for i in range(500):  # the file's free pages go first
        try:
            await alice.SendNotification(send_request(idempotency_key=f"fill-{i}", metadata=big))
        except grpc.aio.AioRpcError as exc:
            refused = rich_error(exc)
            break
    assert refused is not None, "the capped database never filled"
    assert (refused.code, refused.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "STORAGE_FULL")
    [logged] = [r for r in caplog.records if r.getMessage().startswith("database storage is full")]
    assert logged.levelno == logging.ERROR
    assert str(Path(server.app.db.space.path or "")) in logged.getMessage()
    assert "bytes" in logged.getMessage() and "free of" in logged.getMessage()
    await wait_health(server.target, NOT_SERVING)
    # Still full: another write fails the same way, and health stays down.
    with pytest.raises(grpc.aio.AioRpcError) as again:
        await alice.SendNotification(send_request(idempotency_key="while-full", metadata=big))
    assert rich_error(again.value).reason == "STORAGE_FULL"
    assert server.app.db.space.full

    await cap_pages(server, 2**30)  # space freed
    await wait_health(server.target, SERVING)
    sent = await alice.SendNotification(send_request(idempotency_key="after", metadata=big))
    assert sent.notification_id
    assert any(r.getMessage().startswith("database storage has room again") for r in caplog.records)


def test_full_storage_is_told_by_the_error_code_of_either_database() -> None:
    full = sqlite3.OperationalError("database or disk is full")
    full.sqlite_errorcode = 13  # type: ignore[attr-defined]
    locked = sqlite3.OperationalError("database or disk is full")  # same text, other code
    locked.sqlite_errorcode = 5  # type: ignore[attr-defined]
    assert is_storage_full(OperationalError("INSERT", {}, full))
    assert not is_storage_full(OperationalError("INSERT", {}, locked))
    assert is_storage_full(asyncpg.exceptions.DiskFullError("could not extend file"))
    wrapped = OperationalError("INSERT", {}, asyncpg.exceptions.DiskFullError("no space"))
    assert is_storage_full(wrapped)
    assert not is_storage_full(asyncpg.exceptions.TooManyConnectionsError("full of clients"))
    assert not is_storage_full(ConnectionRefusedError())
