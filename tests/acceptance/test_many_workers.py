"""Many workers, one database: three ``uns-server`` processes on one PostgreSQL deliver
1,000 notifications to a loopback webhook receiver — every one delivered, none twice
while leases hold, and each notification's timeline consistent."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from tests.conftest import PostgresDatabases
from tests.support.http_receiver import HttpReceiver
from tests.support.process import ServerProcess
from tests.support.server import KEYS, send_request, write_key_file
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import notification_service_pb2_grpc as pb_grpc
from uns.v1 import types_pb2 as t

NOTIFICATIONS = 1000
SERVERS = 3
PRODUCERS = 16

POLICY = """\
notification_type: ops.fanout
spec: {channels: [hook], delivery_mode: GUARANTEED, require_ack: false, max_attempts: 5}
"""


@pytest.fixture
async def receiver() -> AsyncIterator[HttpReceiver]:
    async with HttpReceiver() as rx:
        yield rx


def metadata(who: str) -> tuple[tuple[str, str]]:
    return (("authorization", f"Bearer {KEYS[who]}"),)


async def test_three_servers_deliver_each_notification_once(
    postgres: PostgresDatabases, tmp_path: Path, receiver: HttpReceiver
) -> None:
    url = await postgres.new()
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            "-m",
            "uns_server.cli.admin",
            "--database-url",
            url,
            "policies",
            "put",
            "--file",
            str(policy),
            "--activate",
        ],
        check=True,
        capture_output=True,
    )
    channels = tmp_path / "channels.yaml"
    channels.write_text(f"hook:\n  type: webhook\n  url: {receiver.url('/hook')}\n  secret: s\n")
    keys = write_key_file(tmp_path)
    servers = [
        ServerProcess(
            tmp_path,
            "--database-url",
            url,
            "--api-keys-file",
            str(keys),
            "--channels-file",
            str(channels),
            "--log-level",
            "WARNING",
        )
        for _ in range(SERVERS)
    ]
    try:
        for server in servers:
            await asyncio.to_thread(server.wait_serving)
        channels_ = [grpc.aio.insecure_channel(s.target) for s in servers]
        stubs = [pb_grpc.NotificationServiceStub(c) for c in channels_]
        queue = list(range(NOTIFICATIONS))
        ids: list[str] = []

        async def producer(p: int) -> None:
            stub = stubs[p % SERVERS]  # spread the intake over every replica too
            while queue:
                i = queue.pop()
                reply = await stub.SendNotification(
                    send_request(notification_type="ops.fanout", idempotency_key=f"n{i}"),
                    metadata=metadata("alice"),
                    timeout=30,
                )
                ids.append(reply.notification_id)

        await asyncio.gather(*(producer(p) for p in range(PRODUCERS)))
        await receiver.wait_for_requests(NOTIFICATIONS, within_seconds=300)

        # The full timeline, read back through one replica.
        timeline: list[t.Event] = []
        call = stubs[0].WatchEvents(
            pb.WatchEventsRequest(replay_history=True, kinds=[t.EVENT_KIND_DELIVERY_RESULT]),
            metadata=metadata("oscar"),
        )
        async for response in call:
            if response.HasField("event"):
                timeline.append(response.event)
                if len(timeline) == NOTIFICATIONS:
                    break
        call.cancel()
        for c in channels_:
            await c.close()
    finally:
        codes = [await asyncio.to_thread(s.stop) for s in servers]
    assert codes == [0] * SERVERS
    assert len(set(ids)) == NOTIFICATIONS
    seen = Counter(r.headers["webhook-id"] for r in receiver.requests)
    assert len(receiver.requests) == NOTIFICATIONS  # none twice
    assert set(seen) == {f"{i}:hook:1" for i in ids}  # every one
    assert sorted(e.notification_id for e in timeline) == sorted(ids)
    assert all(e.payload["status"] == "DELIVERED" and e.payload["attempt"] == 1 for e in timeline)
