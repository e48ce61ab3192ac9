"""Group commit: concurrent SendNotification calls share one transaction.

Each call must still get exactly the answer it would get alone: idempotent replays
and conflicts inside one group, a refusal that leaves its neighbours committed,
dedup coalescing inside one group, and two servers racing on the same keys (the
losing group is retried call by call). The RPC span's ``uns.intake.batch_size``
shows that the bursts really were committed in groups.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.support.grpc_errors import rich_error
from tests.support.policies import activate_policy
from tests.support.server import RunningServer, send_request, start_server
from tests.support.tracing import span_capture
from tests.support.watching import events_until
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t
from uns_server.domain.enums import DeliveryMode, Priority

SEND_SPAN = "uns.v1.NotificationService/SendNotification"
BURST = 48


@pytest.fixture
async def traced(db_url: str, tmp_path: Path) -> AsyncIterator[tuple[RunningServer, Any]]:
    await activate_policy(
        db_url,
        "ops.fixed",
        channels=["log"],
        delivery_mode=DeliveryMode.GUARANTEED,
        require_ack=False,
        priority=Priority.HIGH,
    )
    provider, exporter = span_capture()
    server = await start_server(db_url, tmp_path, dispatch_enabled=False, tracer_provider=provider)
    try:
        yield server, exporter
    finally:
        await server.stop()


def batch_sizes(exporter: InMemorySpanExporter) -> list[int]:
    return [
        int(s.attributes["uns.intake.batch_size"])  # type: ignore[arg-type]
        for s in exporter.get_finished_spans()
        if s.name == SEND_SPAN and s.attributes and "uns.intake.batch_size" in s.attributes
    ]


async def outcome(call: Any) -> pb.SendNotificationResponse | grpc.aio.AioRpcError:
    try:
        reply: pb.SendNotificationResponse = await call
        return reply
    except grpc.aio.AioRpcError as err:
        return err


async def test_one_burst_answers_each_call_as_if_it_were_alone(
    traced: tuple[RunningServer, InMemorySpanExporter],
) -> None:
    server, exporter = traced
    alice = server.stub("alice")
    requests: list[tuple[str, pb.SendNotificationRequest]] = []
    for i in range(BURST):
        requests.append(("unique", send_request(idempotency_key=f"u-{i}")))
        if i % 8 == 0:  # the same key and payload, several times in the burst
            requests.append(("same", send_request(idempotency_key="same")))
        if i % 16 == 0:  # one key, two payloads
            requests.append(("clash", send_request(idempotency_key="clash", title=f"v{i}")))
        if i % 12 == 0:  # one dedup window
            requests.append(("dedup", send_request(idempotency_key=f"d-{i}", dedup_key="cpu")))
    # Refused alone: the ACTIVE policy of ops.fixed fixes the priority.
    requests.insert(
        len(requests) // 2,
        (
            "override",
            send_request(
                idempotency_key="override",
                notification_type="ops.fixed",
                priority=t.PRIORITY_LOW,
            ),
        ),
    )
    replies = await asyncio.gather(*(outcome(alice.SendNotification(r)) for _, r in requests))
    by_label: dict[str, list[Any]] = {}
    for (label, _), reply in zip(requests, replies, strict=True):
        by_label.setdefault(label, []).append(reply)

    assert max(batch_sizes(exporter)) > 1, "the burst was never committed as a group"

    unique = by_label["unique"]
    assert all(isinstance(r, pb.SendNotificationResponse) for r in unique)
    assert len({r.notification_id for r in unique}) == BURST
    assert not any(r.idempotent_replay for r in unique)

    same = by_label["same"]
    assert len({r.notification_id for r in same}) == 1
    assert sorted(r.idempotent_replay for r in same) == [False] + [True] * (len(same) - 1)

    clash = by_label["clash"]
    won = [r for r in clash if isinstance(r, pb.SendNotificationResponse)]
    lost = [r for r in clash if isinstance(r, grpc.aio.AioRpcError)]
    assert len(won) == 1 and len(lost) == len(clash) - 1
    for err in lost:
        info = rich_error(err)
        assert (info.code, info.reason) == (grpc.StatusCode.ALREADY_EXISTS, "IDEMPOTENCY_CONFLICT")
        assert info.metadata["notification_id"] == won[0].notification_id

    [refused] = by_label["override"]
    assert isinstance(refused, grpc.aio.AioRpcError)
    assert rich_error(refused).reason == "POLICY_OVERRIDE"

    dedup = by_label["dedup"]
    leaders = [r for r in dedup if not r.dedup_owner_id]
    assert len(leaders) == 1
    assert {r.dedup_owner_id for r in dedup if r.dedup_owner_id} == {leaders[0].notification_id}

    # Exactly the accepted notifications exist, each with exactly one ACCEPTED event.
    accepted = {r.notification_id for r in unique + same + won + dedup}
    listed = await server.stub("oscar").ListNotifications(
        pb.ListNotificationsRequest(page_size=1000)
    )
    assert {n.id for n in listed.notifications} == accepted
    history = await events_until(
        server.stub("oscar"),
        pb.WatchEventsRequest(after_sequence=0, replay_history=True),
        lambda seen: sum(e.kind == t.EVENT_KIND_ACCEPTED for e in seen) >= len(accepted),
    )
    accepted_events = [e.notification_id for e in history if e.kind == t.EVENT_KIND_ACCEPTED]
    assert sorted(accepted_events) == sorted(accepted)


async def test_two_servers_racing_on_the_same_keys_agree(db_url: str, tmp_path: Path) -> None:
    """Both groups insert the same keys; the loser rolls back and retries call by call,
    then replays the winner's rows."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = await start_server(db_url, tmp_path / "a", dispatch_enabled=False)
    second = await start_server(db_url, tmp_path / "b", dispatch_enabled=False)
    try:
        keys = [f"race-{i}" for i in range(BURST)]
        calls = [
            srv.stub("alice").SendNotification(send_request(idempotency_key=key))
            for key in keys
            for srv in (first, second)
        ]
        replies: list[pb.SendNotificationResponse] = await asyncio.gather(*calls)
        by_key: dict[str, list[pb.SendNotificationResponse]] = {}
        for i, reply in enumerate(replies):
            by_key.setdefault(keys[i // 2], []).append(reply)
        for key, pair in by_key.items():
            assert len({r.notification_id for r in pair}) == 1, key
            assert sorted(r.idempotent_replay for r in pair) == [False, True], key
        listed = await first.stub("oscar").ListNotifications(
            pb.ListNotificationsRequest(page_size=1000)
        )
        assert len(listed.notifications) == len(keys)
    finally:
        await first.stop()
        await second.stop()
