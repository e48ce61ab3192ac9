"""``beat``: the Python clients' HeartbeatService.Beat (issue 44 item 5), against a real
server on SQLite: a producer's beat moves the deadline; an unknown heartbeat is
NotFound; a responder may not beat."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

import pytest

from tests.support.people import stub_as
from tests.support.server import RunningServer
from uns.v1 import heartbeat_service_pb2 as hpb
from uns.v1 import heartbeat_service_pb2_grpc as hpb_grpc
from uns_clients import AsyncClient, Client, NotFound, PermissionDenied


async def _put(server: RunningServer) -> None:
    heartbeat = hpb.HeartbeatMonitor(
        heartbeat_id="nightly-backup",
        notification_type="demo.alert",
        title="The nightly backup did not run",
        message="No beat from backup.sh",
    )
    heartbeat.interval.FromTimedelta(timedelta(days=1))
    operator = stub_as(server, hpb_grpc.HeartbeatServiceStub, "oscar")
    await operator.PutHeartbeat(hpb.PutHeartbeatRequest(heartbeat=heartbeat))


async def test_async_and_blocking_clients_beat(
    server: RunningServer,
    async_client: Callable[[str], AsyncClient],
    sync_client: Callable[[str], Client],
) -> None:
    await _put(server)
    beaten = await async_client("alice").beat("nightly-backup")
    assert beaten.state == hpb.HEARTBEAT_STATE_UP
    first = beaten.last_beat_time.ToDatetime()
    blocking = sync_client("alice")
    again = await asyncio.to_thread(blocking.beat, "nightly-backup")
    assert again.last_beat_time.ToDatetime() >= first
    deadline = again.deadline_time.ToDatetime() - again.last_beat_time.ToDatetime()
    assert deadline == timedelta(days=1)
    with pytest.raises(NotFound):
        await async_client("alice").beat("weekly-report")
    with pytest.raises(PermissionDenied):
        await async_client("rita").beat("nightly-backup")
    with pytest.raises(NotFound):
        await asyncio.to_thread(blocking.beat, "weekly-report")
