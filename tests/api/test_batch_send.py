"""BatchSendNotifications (SPEC §6 Batches) through gRPC, on both databases.

One result per request, in order: each exactly what the single send would answer
or refuse with (its google.rpc.Status carries the ErrorInfo), idempotency and dedup
decided against committed notifications and against earlier items of the same
batch alike, a refused item leaving the others accepted, the principal's budget
spent per item, and more than 1,000 requests refused as a whole.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.support.grpc_errors import RichError, rich_error, rich_status
from tests.support.policies import activate_policy
from tests.support.server import RunningServer, send_request, start_server
from tests.support.tracing import span_capture
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t
from uns_server.domain.enums import DeliveryMode, Priority
from uns_server.settings import Settings

BATCH_SPAN = "uns.v1.NotificationService/BatchSendNotifications"


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


def batch(*requests: pb.SendNotificationRequest) -> pb.BatchSendNotificationsRequest:
    return pb.BatchSendNotificationsRequest(requests=list(requests))


def ok(result: pb.BatchSendResult) -> pb.SendNotificationResponse:
    assert result.WhichOneof("result") == "response", result
    return result.response


def refused(result: pb.BatchSendResult) -> RichError:
    assert result.WhichOneof("result") == "error", result
    error = rich_status(result.error)
    assert error.domain == "uns.v1"
    return error


async def test_each_item_answers_as_its_single_send_would(
    traced: tuple[RunningServer, InMemorySpanExporter],
) -> None:
    server, exporter = traced
    alice = server.stub("alice")
    # Committed before the batch: a replay and a conflict of it, a dedup leader.
    before = await alice.SendNotification(send_request(idempotency_key="before"))
    leader = await alice.SendNotification(send_request(idempotency_key="lead", dedup_key="cpu"))
    reply = await alice.BatchSendNotifications(
        batch(
            send_request(idempotency_key="new-0"),  # 0 new
            send_request(idempotency_key="before"),  # 1 replay of a committed send
            send_request(idempotency_key="before", title="changed"),  # 2 conflict
            send_request(idempotency_key="twice"),  # 3 new
            send_request(idempotency_key="twice"),  # 4 replay of item 3
            send_request(idempotency_key="twice", title="other"),  # 5 conflict with item 3
            send_request(idempotency_key="f-1", dedup_key="cpu"),  # 6 follower of `leader`
            send_request(idempotency_key="m-1", dedup_key="mem"),  # 7 leader of a new window
            send_request(idempotency_key="m-2", dedup_key="mem"),  # 8 follower of item 7
            send_request(idempotency_key="bad", title=""),  # 9 INVALID_REQUEST
            send_request(  # 10 POLICY_OVERRIDE: the ACTIVE policy fixes the priority
                idempotency_key="override", notification_type="ops.fixed", priority=t.PRIORITY_LOW
            ),
            send_request(idempotency_key="new-1"),  # 11 new, after the refusals
        )
    )
    results = list(reply.results)
    assert len(results) == 12

    new0, new1 = ok(results[0]), ok(results[11])
    assert not new0.idempotent_replay and not new1.idempotent_replay
    assert new0.state == t.NOTIFICATION_STATE_PENDING

    replay = ok(results[1])
    assert (replay.notification_id, replay.idempotent_replay) == (before.notification_id, True)
    conflict = refused(results[2])
    assert (conflict.code, conflict.reason) == (
        grpc.StatusCode.ALREADY_EXISTS,
        "IDEMPOTENCY_CONFLICT",
    )
    assert conflict.metadata["notification_id"] == before.notification_id

    first, again = ok(results[3]), ok(results[4])
    assert not first.idempotent_replay
    assert (again.notification_id, again.idempotent_replay) == (first.notification_id, True)
    clash = refused(results[5])
    assert clash.reason == "IDEMPOTENCY_CONFLICT"
    assert clash.metadata["notification_id"] == first.notification_id

    assert ok(results[6]).dedup_owner_id == leader.notification_id
    mem_leader, mem_follower = ok(results[7]), ok(results[8])
    assert mem_leader.dedup_owner_id == ""
    assert mem_follower.dedup_owner_id == mem_leader.notification_id

    invalid = refused(results[9])
    assert (invalid.code, invalid.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_REQUEST")
    assert "title" in invalid.violations  # the path a single send names
    override = refused(results[10])
    assert (override.code, override.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "POLICY_OVERRIDE")

    # The refusals wrote nothing; each accepted item is there, as its single send.
    single = await alice.SendNotification(send_request(idempotency_key="bad", title="fixed"))
    assert not single.idempotent_replay
    for item in (new0, new1, first, mem_follower):
        got = await alice.GetNotification(
            pb.GetNotificationRequest(notification_id=item.notification_id)
        )
        assert got.notification.id == item.notification_id
    # The same batch again: every accepted item replays, every refusal repeats.
    again_reply = await alice.BatchSendNotifications(
        batch(
            send_request(idempotency_key="new-0"),
            send_request(idempotency_key="twice", title="other"),
        )
    )
    replayed = ok(again_reply.results[0])
    assert (replayed.notification_id, replayed.idempotent_replay) == (new0.notification_id, True)
    assert refused(again_reply.results[1]).reason == "IDEMPOTENCY_CONFLICT"

    # The whole batch went through one group commit.
    [span] = [s for s in exporter.get_finished_spans() if s.name == BATCH_SPAN][:1]
    assert span.attributes is not None
    assert span.attributes["uns.intake.batch_requests"] == 12


async def test_idempotency_keys_are_per_item_across_many_groups(
    traced: tuple[RunningServer, InMemorySpanExporter],
) -> None:
    server, _ = traced
    alice = server.stub("alice")
    requests = [send_request(idempotency_key=f"k-{i}") for i in range(300)]
    first = await alice.BatchSendNotifications(batch(*requests))
    ids = [ok(r).notification_id for r in first.results]
    assert len(set(ids)) == 300
    again = await alice.BatchSendNotifications(batch(*requests))
    assert [ok(r).notification_id for r in again.results] == ids
    assert all(ok(r).idempotent_replay for r in again.results)
    listed = await alice.ListNotifications(pb.ListNotificationsRequest(page_size=1000))
    assert {n.id for n in listed.notifications} >= set(ids)


async def test_more_than_a_thousand_requests_is_invalid_request_and_writes_nothing(
    traced: tuple[RunningServer, InMemorySpanExporter],
) -> None:
    server, _ = traced
    alice = server.stub("alice")
    requests = [send_request(idempotency_key=f"over-{i}") for i in range(1001)]
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await alice.BatchSendNotifications(batch(*requests))
    error = rich_error(raised.value)
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_REQUEST")
    assert "requests" in error.violations
    single = await alice.SendNotification(requests[0])
    assert not single.idempotent_replay  # the refused batch wrote nothing
    # Exactly 1,000 is allowed; an empty batch answers nothing.
    full = await alice.BatchSendNotifications(batch(*requests[1:]))
    assert len(full.results) == 1000
    assert all(r.WhichOneof("result") == "response" for r in full.results)
    assert len((await alice.BatchSendNotifications(batch())).results) == 0


async def test_only_producers_may_batch(traced: tuple[RunningServer, InMemorySpanExporter]) -> None:
    server, _ = traced
    for who in ("rita", "oscar"):
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await server.stub(who).BatchSendNotifications(batch(send_request()))
        assert rich_error(raised.value).reason == "PERMISSION_DENIED"


async def test_a_batch_is_charged_as_a_whole_never_partly_refused(
    db_url: str, tmp_path: Path
) -> None:
    # A burst of 5, one token back every 100 s.
    server = await start_server(
        db_url, tmp_path, dispatch_enabled=False, rate_limit_per_second=0.01, rate_limit_burst=5
    )
    try:
        alice = server.stub("alice")
        await alice.SendNotification(send_request(idempotency_key="single"))  # 4 left
        five = [send_request(idempotency_key=f"r-{i}") for i in range(5)]
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await alice.BatchSendNotifications(batch(*five))
        limited = rich_error(raised.value)
        assert (limited.code, limited.reason) == (
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "RATE_LIMITED",
        )
        assert limited.metadata["limit"] == "principal"
        assert limited.metadata["requests"] == "5"
        assert limited.retry_delay is not None and limited.retry_delay > 0
        # The refused batch wrote nothing and took nothing: four items still fit, whole.
        reply = await alice.BatchSendNotifications(batch(*five[1:]))
        assert all(not ok(r).idempotent_replay for r in reply.results)
        assert len(reply.results) == 4
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await alice.SendNotification(five[0])
        assert rich_error(raised.value).reason == "RATE_LIMITED"
        # A batch larger than the whole bucket takes a full bucket: bob's is his own.
        bob = await server.stub("bob").BatchSendNotifications(
            batch(*(send_request(idempotency_key=f"b-{i}") for i in range(7)))
        )
        assert len([ok(r) for r in bob.results]) == 7
    finally:
        await server.stop()


async def test_the_default_budget_accepts_a_full_batch_from_an_idle_producer(
    db_url: str, tmp_path: Path
) -> None:
    defaults = Settings()
    server = await start_server(
        db_url,
        tmp_path,
        dispatch_enabled=False,
        rate_limit_per_second=defaults.rate_limit_per_second,
        rate_limit_burst=defaults.rate_limit_burst,
    )
    try:
        requests = [send_request(idempotency_key=f"full-{i}") for i in range(1000)]
        reply = await server.stub("alice").BatchSendNotifications(batch(*requests))
        assert len([ok(r) for r in reply.results]) == 1000
    finally:
        await server.stop()
