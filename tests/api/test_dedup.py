"""Dedup coalescing windows and generations (seed 000 §1.1), with a movable clock."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.server import RunningServer, ShiftableClock, send_request, start_server
from tests.support.watching import events_until
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t

WINDOW_SECONDS = 300  # the server default dedup_window_seconds


@pytest.fixture
def clock() -> ShiftableClock:
    return ShiftableClock()


@pytest.fixture
async def manual(
    db_url: str, tmp_path: Path, clock: ShiftableClock
) -> AsyncIterator[RunningServer]:
    """Dispatch off: the test decides when the leader is delivered (run_once)."""
    running = await start_server(db_url, tmp_path, clock=clock, dispatch_enabled=False)
    try:
        yield running
    finally:
        await running.stop()


async def get(srv: RunningServer, notification_id: str) -> t.Notification:
    reply = await srv.stub("oscar").GetNotification(
        pb.GetNotificationRequest(notification_id=notification_id)
    )
    return reply.notification


async def send(srv: RunningServer, key: str, **fields: object) -> pb.SendNotificationResponse:
    reply: pb.SendNotificationResponse = await srv.stub("alice").SendNotification(
        send_request(idempotency_key=key, dedup_key="cpu:web-1", **fields)
    )
    return reply


async def test_followers_wait_for_a_pending_leader_then_are_satisfied(
    manual: RunningServer,
) -> None:
    leader = await send(manual, "a")
    follower = await send(manual, "b")
    assert follower.state == t.NOTIFICATION_STATE_PENDING
    assert follower.dedup_owner_id == leader.notification_id
    assert (await get(manual, follower.notification_id)).dedup_generation == 1

    assert (await manual.app.dispatcher.run_once()).claimed == 1  # followers are never dispatched
    assert (await get(manual, leader.notification_id)).state == t.NOTIFICATION_STATE_DELIVERED
    satisfied = await get(manual, follower.notification_id)
    assert satisfied.state == t.NOTIFICATION_STATE_DEDUPLICATED
    seen = await events_until(
        manual.stub("alice"),
        pb.WatchEventsRequest(replay_history=True, notification_ids=[follower.notification_id]),
        lambda evs: any(e.kind == t.EVENT_KIND_DEDUP_SATISFIED for e in evs),
    )
    linked = next(e for e in seen if e.kind == t.EVENT_KIND_DEDUP_LINKED)
    assert linked.payload["owner_id"] == leader.notification_id
    assert linked.payload["owner_status"] == "PENDING"


async def test_pending_ownership_survives_window_expiry(
    manual: RunningServer, clock: ShiftableClock
) -> None:
    leader = await send(manual, "a")
    clock.advance(seconds=WINDOW_SECONDS * 3)
    late = await send(manual, "b")
    assert late.dedup_owner_id == leader.notification_id


async def test_delivered_leader_deduplicates_inside_window_then_new_generation(
    manual: RunningServer, clock: ShiftableClock
) -> None:
    leader = await send(manual, "a")
    await manual.app.dispatcher.run_once()
    inside = await send(manual, "b")
    assert inside.state == t.NOTIFICATION_STATE_DEDUPLICATED
    assert inside.dedup_owner_id == leader.notification_id

    clock.advance(seconds=WINDOW_SECONDS + 1)
    after = await send(manual, "c")
    assert after.state == t.NOTIFICATION_STATE_PENDING and after.dedup_owner_id == ""
    assert (await get(manual, after.notification_id)).dedup_generation == 2
    assert (await get(manual, leader.notification_id)).dedup_generation == 1


async def test_different_effective_policy_never_coalesces(manual: RunningServer) -> None:
    guaranteed = await send(manual, "a")
    best_effort = await send(manual, "b", delivery_mode=t.DELIVERY_MODE_BEST_EFFORT)
    assert best_effort.dedup_owner_id == ""
    assert guaranteed.dedup_owner_id == ""


async def test_dedup_is_scoped_to_principal_and_source(manual: RunningServer) -> None:
    leader = await send(manual, "a")
    other_source = await send(manual, "b", source="another-monitor")
    assert other_source.dedup_owner_id == ""
    bob = await manual.stub("bob").SendNotification(
        send_request(idempotency_key="c", dedup_key="cpu:web-1")
    )
    assert bob.dedup_owner_id == "" and leader.dedup_owner_id == ""
