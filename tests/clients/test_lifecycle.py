"""acknowledge(), snooze(), replay() and resolve_failure() through both clients."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.clients.helpers import config_for, send_fields
from tests.support.policies import activate_policy
from tests.support.ports import closed_port
from tests.support.server import RunningServer, start_server
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t
from uns_clients import (
    AckConflict,
    AckNotPending,
    AsyncClient,
    Client,
    NotDeadLettered,
    NotFound,
    NotWithdrawable,
)
from uns_server.domain.enums import DeliveryMode

AsyncClients = Callable[[str], AsyncClient]
SyncClients = Callable[[str], Client]
UNKNOWN_ID = "00000000-0000-4000-8000-000000000000"


async def delivered_with_ack(alice: AsyncClient) -> str:
    sent = await alice.send(**send_fields(require_ack=True, wait_for_first_attempt=True))
    assert sent.state == t.NOTIFICATION_STATE_DELIVERED and sent.require_ack
    return sent.notification_id


async def test_acknowledge_is_idempotent_for_the_same_outcome(
    server: RunningServer, async_client: AsyncClients
) -> None:
    alice, rita = async_client("alice"), async_client("rita")
    notification_id = await delivered_with_ack(alice)
    acked = await rita.acknowledge(notification_id, metadata={"note": "on it"})
    assert isinstance(acked, pb.AcknowledgeResponse)
    assert acked.notification.ack_state == t.ACK_STATE_ACKED and not acked.idempotent_replay
    assert acked.notification.ack_actor == "rita"
    assert dict(acked.notification.response_metadata) == {"note": "on it"}
    again = await rita.acknowledge(notification_id, metadata={"note": "on it"})
    assert again.idempotent_replay and again.notification.ack_state == t.ACK_STATE_ACKED
    with pytest.raises(AckConflict):
        await rita.acknowledge(notification_id, dismiss=True)
    assert (await alice.get(notification_id)).ack_state == t.ACK_STATE_ACKED


async def test_snooze_pauses_an_owed_answer_in_both_clients(
    server: RunningServer, async_client: AsyncClients, sync_client: SyncClients
) -> None:
    alice, rita = async_client("alice"), async_client("rita")
    notification_id = await delivered_with_ack(alice)
    snoozed = await rita.snooze(notification_id, 600)
    assert snoozed.ack_state == t.ACK_STATE_SNOOZED and snoozed.HasField("snooze_until_time")
    again = await asyncio.to_thread(sync_client("rita").snooze, notification_id, 60)
    assert again.snooze_until_time.ToDatetime() < snoozed.snooze_until_time.ToDatetime()
    acked = await rita.acknowledge(notification_id)  # still owed
    assert acked.notification.ack_state == t.ACK_STATE_ACKED
    with pytest.raises(AckConflict):
        await rita.snooze(notification_id, 60)


async def test_acknowledge_refusals(server: RunningServer, async_client: AsyncClients) -> None:
    alice, rita = async_client("alice"), async_client("rita")
    sent = await alice.send(**send_fields(wait_for_first_attempt=True))
    with pytest.raises(AckNotPending):
        await rita.acknowledge(sent.notification_id)  # no ack required
    with pytest.raises(NotFound):
        await rita.acknowledge(UNKNOWN_ID)


async def test_sync_dismiss(
    server: RunningServer, async_client: AsyncClients, sync_client: SyncClients
) -> None:
    notification_id = await delivered_with_ack(async_client("alice"))
    rita = sync_client("rita")
    dismissed = await asyncio.to_thread(rita.acknowledge, notification_id, dismiss=True)
    assert dismissed.notification.ack_state == t.ACK_STATE_DISMISSED


async def test_replay_and_resolve_failure_refuse_what_is_not_dead_lettered(
    server: RunningServer, async_client: AsyncClients, sync_client: SyncClients
) -> None:
    sent = await async_client("alice").send(**send_fields(wait_for_first_attempt=True))
    oscar = async_client("oscar")
    with pytest.raises(NotDeadLettered):
        await oscar.replay(sent.notification_id)
    with pytest.raises(NotDeadLettered):
        await oscar.resolve_failure(sent.notification_id)
    with pytest.raises(NotFound):
        await asyncio.to_thread(sync_client("oscar").replay, UNKNOWN_ID)
    with pytest.raises(NotDeadLettered):
        await asyncio.to_thread(sync_client("oscar").resolve_failure, sent.notification_id)


async def test_validate_only_previews_without_changing_anything(
    db_url: str, tmp_path: Path
) -> None:
    # A `broken` webhook channel (nothing listens): a replica claims only work whose
    # channels it has, so the dead letter needs a configured channel that fails.
    channels = tmp_path / "channels.yaml"
    channels.write_text(
        f"broken:\n  type: webhook\n  url: http://127.0.0.1:{closed_port()}/hook\n"
        "  secret: test-secret\n  timeout_seconds: 2\n"
    )
    server = await start_server(db_url, tmp_path, channels_file=str(channels))
    alice = AsyncClient(config_for(server.target, "alice"))
    oscar = AsyncClient(config_for(server.target, "oscar"))
    oscar_sync = Client(config_for(server.target, "oscar"))
    try:
        await activate_policy(
            db_url,
            "ops.broken",
            channels=["broken"],
            delivery_mode=DeliveryMode.GUARANTEED,
            require_ack=False,
            max_attempts=1,
        )
        sent = await alice.send(
            **send_fields(notification_type="ops.broken", wait_for_first_attempt=True)
        )
        nid = sent.notification_id
        before = await oscar.get(nid)
        assert before.state == t.NOTIFICATION_STATE_FAILED and before.dead_letter

        would = await asyncio.to_thread(
            oscar_sync.replay, nid, reason="preview", validate_only=True
        )
        assert would.state == t.NOTIFICATION_STATE_PENDING and would.cycle == 2
        resolved = await oscar.resolve_failure(nid, validate_only=True)
        assert resolved.state == t.NOTIFICATION_STATE_FAILED and not resolved.dead_letter
        assert await oscar.get(nid) == before
    finally:
        oscar_sync.close()
        await alice.close()
        await oscar.close()
        await server.stop()


async def test_withdraw_a_scheduled_send_async_and_sync(
    server: RunningServer, async_client: AsyncClients, sync_client: SyncClients
) -> None:
    alice = async_client("alice")
    sent = await alice.send(**send_fields(schedule_time=datetime.now(UTC) + timedelta(hours=1)))
    withdrawn = await alice.withdraw(sent.notification_id, reason="cleared")
    assert withdrawn.state == t.NOTIFICATION_STATE_WITHDRAWN
    assert withdrawn.withdraw_reason == "cleared" and withdrawn.HasField("schedule_time")
    again = await asyncio.to_thread(sync_client("alice").withdraw, sent.notification_id)
    assert again.withdraw_time == withdrawn.withdraw_time
    with pytest.raises(NotWithdrawable):
        await async_client("oscar").withdraw(sent.notification_id)
    with pytest.raises(NotFound):
        await async_client("bob").withdraw(sent.notification_id)
