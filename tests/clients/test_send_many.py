"""``send_many`` (BatchSendNotifications) through both clients, against a real server
(on SQLite): one typed answer per request, in order; a retried batch replays."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from tests.clients.helpers import send_fields
from tests.support.server import RunningServer, send_request
from uns.v1 import notification_service_pb2 as pb
from uns_clients import AsyncClient, Client, IdempotencyConflict, InvalidRequest

AsyncClients = Callable[[str], AsyncClient]
SyncClients = Callable[[str], Client]


async def test_async_send_many_answers_each_item(
    server: RunningServer, async_client: AsyncClients
) -> None:
    alice = async_client("alice")
    results = await alice.send_many(
        [
            send_fields(idempotency_key="a"),
            send_request(idempotency_key="a", title="another payload"),  # a ready-made request
            send_fields(title=""),  # invalid
            send_fields(),  # no key: the client gives it one
        ]
    )
    first, clash, invalid, keyless = results
    assert isinstance(first, pb.SendNotificationResponse) and not first.idempotent_replay
    assert isinstance(clash, IdempotencyConflict)
    assert clash.metadata["notification_id"] == first.notification_id
    assert isinstance(invalid, InvalidRequest) and "title" in invalid.violations
    assert isinstance(keyless, pb.SendNotificationResponse)
    got = await alice.get(keyless.notification_id)
    assert got.idempotency_key  # generated before the first attempt

    [replayed] = await alice.send_many([send_fields(idempotency_key="a")])
    assert isinstance(replayed, pb.SendNotificationResponse)
    assert (replayed.notification_id, replayed.idempotent_replay) == (first.notification_id, True)


async def test_async_send_many_over_the_limit_raises(async_client: AsyncClients) -> None:
    with pytest.raises(InvalidRequest) as raised:
        await async_client("alice").send_many([send_fields() for _ in range(1001)])
    assert "requests" in raised.value.violations


async def test_blocking_send_many(server: RunningServer, sync_client: SyncClients) -> None:
    alice = sync_client("alice")
    results = await asyncio.to_thread(
        alice.send_many, [send_fields(idempotency_key="b1"), send_fields(idempotency_key="b1")]
    )
    first, again = results
    assert isinstance(first, pb.SendNotificationResponse)
    assert isinstance(again, pb.SendNotificationResponse)
    assert (again.notification_id, again.idempotent_replay) == (first.notification_id, True)
    assert await asyncio.to_thread(alice.send_many, []) == []
