"""The thin end-to-end slice through the public gRPC surface, on both dialects."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from google.protobuf import descriptor_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2

from tests.support.grpc_errors import rich_error
from tests.support.server import RunningServer, send_request
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import notification_service_pb2_grpc as pb_grpc
from uns.v1 import types_pb2 as t
from uns_server.services.queries import PAGE_BYTES_MAX
from uns_server.store.db import Database
from uns_server.store.events import SqlEventReads


async def test_send_is_delivered_through_log_channel_and_recorded(server: RunningServer) -> None:
    alice = server.stub("alice")
    sent = await alice.SendNotification(
        send_request(idempotency_key="k1", wait_for_first_attempt=True)
    )
    assert sent.state == t.NOTIFICATION_STATE_DELIVERED
    assert list(sent.resolved_channels) == ["log"]
    assert sent.delivery_mode == t.DELIVERY_MODE_GUARANTEED

    got = (
        await alice.GetNotification(pb.GetNotificationRequest(notification_id=sent.notification_id))
    ).notification
    assert got.state == t.NOTIFICATION_STATE_DELIVERED
    assert got.principal == "alice"
    assert got.attempts == 1 and got.cycle == 1
    assert list(got.outcome.channels_succeeded) == ["log"]
    assert got.deliver_time.seconds > 0

    db = Database(server.app.settings.database_url)
    try:
        async with db.read() as conn:
            timeline = await SqlEventReads(conn).read_after(
                0, limit=100, notification_ids=[sent.notification_id]
            )
            kinds = [e.kind for e in timeline]
    finally:
        await db.dispose()
    assert kinds == [
        "ACCEPTED",
        "ATTEMPT_STARTED",
        "CHANNEL_ATTEMPT_STARTED",
        "CHANNEL_ATTEMPT_RESULT",
        "DELIVERY_RESULT",
    ]


async def test_send_returns_after_commit_as_pending(server: RunningServer) -> None:
    sent = await server.stub("alice").SendNotification(send_request())
    assert sent.state in (t.NOTIFICATION_STATE_PENDING, t.NOTIFICATION_STATE_DELIVERED)
    assert sent.notification_id


async def test_idempotent_replay_and_conflict(server: RunningServer) -> None:
    alice = server.stub("alice")
    first = await alice.SendNotification(send_request(idempotency_key="same"))
    again = await alice.SendNotification(send_request(idempotency_key="same"))
    assert again.notification_id == first.notification_id
    assert again.idempotent_replay and not first.idempotent_replay
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await alice.SendNotification(send_request(idempotency_key="same", title="other"))
    err = rich_error(exc.value)
    assert (err.code, err.reason, err.domain) == (
        grpc.StatusCode.ALREADY_EXISTS,
        "IDEMPOTENCY_CONFLICT",
        "uns.v1",
    )


async def test_invalid_request_lists_field_violations_and_writes_nothing(
    server: RunningServer,
) -> None:
    alice = server.stub("alice")
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await alice.SendNotification(pb.SendNotificationRequest(title="x" * 300))
    err = rich_error(exc.value)
    assert err.code == grpc.StatusCode.INVALID_ARGUMENT and err.reason == "INVALID_REQUEST"
    assert {"notification_type", "intent", "title", "message", "source"} <= set(err.violations)
    listed = await server.stub("oscar").ListNotifications(pb.ListNotificationsRequest())
    assert list(listed.notifications) == []


async def test_reserved_metadata_key_is_refused(server: RunningServer) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await server.stub("alice").SendNotification(
            send_request(metadata={"slack_channel": "#ceo"})
        )
    err = rich_error(exc.value)
    assert (err.code, err.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "RESERVED_METADATA_KEY")


async def test_unknown_enum_value_is_invalid(server: RunningServer) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await server.stub("alice").SendNotification(send_request(intent=42))
    err = rich_error(exc.value)
    assert err.reason == "INVALID_REQUEST" and "intent" in err.violations


async def test_unreadable_values_are_listed_with_every_other_problem(
    server: RunningServer,
) -> None:
    """Unknown enum numbers and non-finite metadata numbers (which the wire can carry)
    come in the same BadRequest as the ordinary field problems: one round trip."""
    request = send_request(intent=99, priority=7, delivery_mode=9, title="", source="")
    request.metadata.fields["x"].number_value = float("inf")
    request.metadata.fields["slack_channel"].string_value = "#ceo"
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await server.stub("alice").SendNotification(request)
    err = rich_error(exc.value)
    assert (err.code, err.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_REQUEST")
    assert set(err.violations) == {
        "intent",
        "priority",
        "delivery_mode",
        "metadata",
        "title",
        "source",
    }
    assert err.metadata["fields"].split(",") == list(err.violations)


@pytest.mark.parametrize(
    ("who", "code", "reason"),
    [
        (None, grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED"),
        ("uns_not_a_key", grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED"),
        ("rita", grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED"),
    ],
)
async def test_auth_refusals(
    server: RunningServer, who: str | None, code: grpc.StatusCode, reason: str
) -> None:
    async with grpc.aio.insecure_channel(server.target) as channel:
        stub = pb_grpc.NotificationServiceStub(channel)
        metadata = () if who is None else (("authorization", f"Bearer {server.stub(who).key}"),)
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await stub.SendNotification(send_request(), metadata=metadata)
    err = rich_error(exc.value)
    assert (err.code, err.reason) == (code, reason)


async def test_producers_cannot_see_each_other(server: RunningServer) -> None:
    sent = await server.stub("alice").SendNotification(send_request())
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await server.stub("bob").GetNotification(
            pb.GetNotificationRequest(notification_id=sent.notification_id)
        )
    assert rich_error(exc.value).reason == "NOT_FOUND"
    bobs = await server.stub("bob").ListNotifications(pb.ListNotificationsRequest())
    assert list(bobs.notifications) == []
    seen = await server.stub("oscar").GetNotification(
        pb.GetNotificationRequest(notification_id=sent.notification_id)
    )
    assert seen.notification.principal == "alice"


async def test_unknown_and_malformed_ids(server: RunningServer) -> None:
    alice = server.stub("alice")
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await alice.GetNotification(
            pb.GetNotificationRequest(notification_id="00000000-0000-4000-8000-000000000000")
        )
    assert rich_error(exc.value).code == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await alice.GetNotification(pb.GetNotificationRequest(notification_id="nope"))
    assert rich_error(exc.value).reason == "INVALID_REQUEST"


async def test_list_pages_newest_first_with_filter(server: RunningServer) -> None:
    alice = server.stub("alice")
    ids = [
        (await alice.SendNotification(send_request(idempotency_key=f"p{i}"))).notification_id
        for i in range(5)
    ]
    seen: list[str] = []
    token = ""
    while True:
        page = await alice.ListNotifications(
            pb.ListNotificationsRequest(
                page_size=2, page_token=token, filter='source = "disk-monitor"'
            )
        )
        seen += [n.id for n in page.notifications]
        token = page.next_page_token
        if not token:
            break
    assert seen == list(reversed(ids))
    # AIP-158: a page size above the maximum is coerced to it; a negative one is refused.
    everything = await alice.ListNotifications(pb.ListNotificationsRequest(page_size=2**31 - 1))
    assert [n.id for n in everything.notifications] == seen and not everything.next_page_token
    for bad in (
        pb.ListNotificationsRequest(filter="colour = red"),
        pb.ListNotificationsRequest(page_size=-1),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await alice.ListNotifications(bad)
        assert rich_error(exc.value).reason == "INVALID_REQUEST"
    # The column's name is not an alias: the refusal points to the wire name.
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await alice.ListNotifications(pb.ListNotificationsRequest(filter="status = FAILED"))
    assert rich_error(exc.value).reason == "INVALID_REQUEST"
    assert "the API calls it `state`" in (exc.value.details() or "")


async def test_a_page_of_large_notifications_stops_at_a_megabyte(server: RunningServer) -> None:
    """AIP-158 lets a page be shorter than page_size: one of notifications at their size
    limits stops near PAGE_BYTES_MAX, and the pages still list each one exactly once."""
    alice = server.stub("alice")
    large = {"message": "m" * 16_000, "metadata": {f"k{j:04d}": "v" * 8 for j in range(700)}}
    ids = []
    for i in range(60):  # ~2 MB of documents, read in chunks of LIST_CHUNK_ROWS
        fields = large if i % 3 else {}
        sent = await alice.SendNotification(send_request(idempotency_key=f"big{i}", **fields))
        ids.append(sent.notification_id)
    pages: list[list[str]] = []
    token = ""
    while True:
        page = await alice.ListNotifications(
            pb.ListNotificationsRequest(page_size=1000, page_token=token)
        )
        pages.append([n.id for n in page.notifications])
        assert page.ByteSize() < 2 * PAGE_BYTES_MAX
        token = page.next_page_token
        if not token:
            break
    assert len(pages) >= 2 and 0 < len(pages[0]) < 60
    assert [i for p in pages for i in p] == list(reversed(ids))


async def test_oversized_message_is_refused(server: RunningServer) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await server.stub("alice").SendNotification(send_request(message="x" * 2_000_000))
    assert exc.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_health_and_reflection(server: RunningServer) -> None:
    async with grpc.aio.insecure_channel(server.target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "uns.v1.NotificationService"):
            reply = await health.Check(health_pb2.HealthCheckRequest(service=service))
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        # The same protocol under both names: v1, which current grpcurl asks for first,
        # and v1alpha (wire-identical messages, so the v1alpha stubs speak both).
        for version in ("v1", "v1alpha"):
            name = f"grpc.reflection.{version}.ServerReflection"
            info = channel.stream_stream(
                f"/{name}/ServerReflectionInfo",
                request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
                response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
            )
            call = info(
                iter(
                    [
                        reflection_pb2.ServerReflectionRequest(list_services=""),
                        reflection_pb2.ServerReflectionRequest(
                            file_containing_symbol="uns.v1.NotificationService"
                        ),
                        # grpcurl describe and ghz ask for the method itself.
                        reflection_pb2.ServerReflectionRequest(
                            file_containing_symbol="uns.v1.NotificationService.SendNotification"
                        ),
                        reflection_pb2.ServerReflectionRequest(
                            file_containing_symbol="grpc.health.v1.Health.Check"
                        ),
                        reflection_pb2.ServerReflectionRequest(
                            file_containing_symbol="uns.v1.NotificationService.NoSuchMethod"
                        ),
                        # Both reflection services are listed, so both can be described.
                        reflection_pb2.ServerReflectionRequest(
                            file_containing_symbol="grpc.reflection.v1.ServerReflection"
                        ),
                        reflection_pb2.ServerReflectionRequest(
                            file_containing_symbol="grpc.reflection.v1alpha.ServerReflection"
                        ),
                    ]
                )
            )
            listed, described, method, health_method, missing, v1, v1alpha = [
                response async for response in call
            ]
            names = {s.name for s in listed.list_services_response.service}
            assert {
                "uns.v1.NotificationService",
                "grpc.health.v1.Health",
                "grpc.reflection.v1.ServerReflection",
                "grpc.reflection.v1alpha.ServerReflection",
            } <= names, name
            for reply, package in (
                (v1, "grpc.reflection.v1"),
                (v1alpha, "grpc.reflection.v1alpha"),
            ):
                file = descriptor_pb2.FileDescriptorProto.FromString(
                    reply.file_descriptor_response.file_descriptor_proto[0]
                )
                assert file.package == package, (name, reply)
                (method_proto,) = file.service[0].method
                assert method_proto.input_type == f".{package}.ServerReflectionRequest"
            assert described.file_descriptor_response.file_descriptor_proto, name
            for reply, file_name in (
                (method, "uns/v1/notification_service.proto"),
                (health_method, "grpc_health/v1/health.proto"),
            ):
                first = descriptor_pb2.FileDescriptorProto.FromString(
                    reply.file_descriptor_response.file_descriptor_proto[0]
                )
                assert first.name == file_name, (name, reply)
            assert missing.error_response.error_code == grpc.StatusCode.NOT_FOUND.value[0], name


async def test_concurrent_identical_sends_create_one_row(server: RunningServer) -> None:
    alice = server.stub("alice")
    replies = await asyncio.gather(
        *(alice.SendNotification(send_request(idempotency_key="storm")) for _ in range(20))
    )
    assert len({r.notification_id for r in replies}) == 1
    assert sum(not r.idempotent_replay for r in replies) == 1
    listed = await server.stub("oscar").ListNotifications(pb.ListNotificationsRequest())
    assert len(listed.notifications) == 1
