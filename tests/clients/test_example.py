"""clients/python/examples/producer.py runs as documented against a live server."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

from tests.support.server import KEYS, RunningServer
from uns_clients import AsyncClient

EXAMPLE = Path(__file__).resolve().parents[2] / "clients" / "python" / "examples" / "producer.py"


async def test_producer_example_prints_id_and_follows_to_delivery(
    server: RunningServer, async_client: Callable[[str], AsyncClient]
) -> None:
    env = {**os.environ, "UNS_TARGET": server.target, "UNS_API_KEY": KEYS["alice"]}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(EXAMPLE),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, stderr.decode()
    lines = stdout.decode().splitlines()
    notification_id = lines[0]
    assert uuid.UUID(notification_id)
    kinds = [line.split()[1] for line in lines[1:]]
    assert kinds[0] == "EVENT_KIND_ACCEPTED" and kinds[-1] == "EVENT_KIND_DELIVERY_RESULT"
    got = await async_client("alice").get(notification_id)
    assert got.source == "example-producer"


async def test_producer_example_without_key_explains() -> None:
    env = {k: v for k, v in os.environ.items() if k != "UNS_API_KEY"}
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(EXAMPLE), env=env, stderr=asyncio.subprocess.PIPE
    )
    _, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 2 and b"UNS_API_KEY" in stderr


OVER_TIME = EXAMPLE.with_name("over_time.py")


async def test_over_time_example_prints_the_plan_and_withdraws(
    server: RunningServer, async_client: Callable[[str], AsyncClient]
) -> None:
    env = {**os.environ, "UNS_TARGET": server.target, "UNS_API_KEY": KEYS["alice"]}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(OVER_TIME),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, stderr.decode()
    plan, notification_id, state = stdout.decode().splitlines()
    assert plan == "DELIVERY 1 at +60 min"  # the server defaults: no ack, no reminders
    assert state == "NOTIFICATION_STATE_WITHDRAWN"
    got = await async_client("alice").get(notification_id)
    assert got.withdraw_reason == "maintenance cancelled" and got.HasField("schedule_time")
