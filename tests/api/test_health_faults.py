"""Health tells the truth: repeated storage faults in any required worker (dispatch,
the ack-expiry sweep, follow-ups, message updates) turn gRPC health NOT_SERVING until
they stop, even while the database answers ``SELECT 1``. The fault is injected in
PostgreSQL itself: another session holds an exclusive lock on a table (what a long
migration does), so every round of the workers that use it times out."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from sqlalchemy.engine import make_url

from tests.conftest import PostgresDatabases
from tests.support.server import RunningServer, start_server
from uns_server.workers.supervision import FAULTS_BEFORE_UNHEALTHY, Supervision

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
WITHIN_SECONDS = 60.0


@pytest.fixture
async def server(postgres: PostgresDatabases, tmp_path: Path) -> AsyncIterator[RunningServer]:
    running = await start_server(
        await postgres.new(),
        tmp_path,
        idle_poll_seconds=0.1,
        expiry_poll_seconds=0.1,
        db_command_timeout_seconds=1.0,
    )
    try:
        yield running
    finally:
        await running.stop()


async def wait_health(target: str, expected: int) -> None:
    deadline = time.monotonic() + WITHIN_SECONDS
    async with grpc.aio.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while True:
            reply = await stub.Check(health_pb2.HealthCheckRequest(), timeout=5)
            if reply.status == expected:
                return
            assert time.monotonic() < deadline, f"health stayed {reply.status}"
            await asyncio.sleep(0.1)


@pytest.mark.parametrize(
    ("table", "workers"),
    [
        # Claims, the timers' carry sweep and follow-up claims read the notifications.
        ("uns_notifications", ("dispatch", "followups", "timers")),
        # Deliveries, message updates, follow-ups, staged rules and the timers are jobs
        # of the work table; the rescuer watches all their leases.
        (
            "uns_jobs",
            ("dispatch", "followups", "message_updates", "person_rules", "rescuer", "timers"),
        ),
    ],
)
async def test_repeated_worker_storage_faults_turn_health_not_serving_until_they_stop(
    server: RunningServer, table: str, workers: tuple[str, ...]
) -> None:
    app = server.app
    await wait_health(server.target, SERVING)
    url = make_url(app.settings.database_url).set(drivername="postgresql")
    blocker = await asyncpg.connect(url.render_as_string(hide_password=False))
    try:
        lock = blocker.transaction()
        await lock.start()
        await blocker.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
        await wait_health(server.target, NOT_SERVING)
        deadline = time.monotonic() + WITHIN_SECONDS
        while app.supervision.unhealthy != workers:  # each of them tells
            assert time.monotonic() < deadline, app.supervision.unhealthy
            await asyncio.sleep(0.1)
        await app.db.ping()  # the database itself answers: only the workers can tell
        await lock.rollback()
        await wait_health(server.target, SERVING)
        assert app.supervision.unhealthy == ()
    finally:
        await blocker.close()


def test_one_success_ends_a_run_of_faults() -> None:
    supervision = Supervision()
    for _ in range(FAULTS_BEFORE_UNHEALTHY - 1):
        supervision.failed("dispatch")
    supervision.succeeded("dispatch")  # a blip, then fine: never unhealthy
    supervision.failed("dispatch")
    assert supervision.unhealthy == ()
    for _ in range(FAULTS_BEFORE_UNHEALTHY - 1):
        supervision.failed("dispatch")
    assert supervision.unhealthy == ("dispatch",)
    supervision.failed("expiry")
    assert supervision.unhealthy == ("dispatch",)  # one expiry fault is a blip
    supervision.succeeded("dispatch")
    assert supervision.unhealthy == ()
