"""Input that the database or the parsers cannot hold is INVALID_REQUEST naming the field,
never a server error (issue 42, "Server errors from input"), through gRPC and JSON over
HTTP, on SQLite and PostgreSQL (which refuses NUL in text that SQLite keeps).

The NUL and surrogate cases walk every string (and, over HTTP, every enum) field of every
request of every ``uns.v1`` method, from the descriptors: a field added later is covered
without a new test. Each refusal is logged at most once, and never as an error.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

from tests.support.grpc_errors import rich_error, rich_status
from tests.support.people import minutes, operator_stub, timestamp
from tests.support.server import KEYS, RunningServer, start_server
from uns.v1 import notification_service_pb2 as npb
from uns.v1 import recipient_service_pb2 as rpb
from uns.v1 import recipient_service_pb2_grpc as rpb_grpc
from uns_server.http.connect import Method, methods

# Messages the walk does not enter: well-known types whose strings are not free text.
_OPAQUE = {"google.protobuf.Timestamp", "google.protobuf.Duration", "google.protobuf.Struct"}
_MAX_DEPTH = 4


def _string_paths(
    descriptor: Descriptor, prefix: tuple[FieldDescriptor, ...] = ()
) -> Iterator[tuple[FieldDescriptor, ...]]:
    """Every path of fields from ``descriptor`` down to a string (or, for JSON, an enum)."""
    for field in descriptor.fields:
        path = (*prefix, field)
        if field.type in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_ENUM):
            yield path
        elif (
            field.type == FieldDescriptor.TYPE_MESSAGE
            and field.message_type.full_name not in _OPAQUE
            and not field.message_type.GetOptions().map_entry
            and len(path) < _MAX_DEPTH
        ):
            yield from _string_paths(field.message_type, path)


def _proto_name(path: tuple[FieldDescriptor, ...]) -> str:
    return ".".join(f.name + ("[0]" if f.is_repeated else "") for f in path)


def _json_name(path: tuple[FieldDescriptor, ...]) -> str:
    return ".".join(f.json_name + ("[0]" if f.is_repeated else "") for f in path)


def _with_string(message: Message, path: tuple[FieldDescriptor, ...], value: str) -> None:
    field, rest = path[0], path[1:]
    if not rest:
        if field.is_repeated:
            getattr(message, field.name).append(value)
        else:
            setattr(message, field.name, value)
        return
    child = getattr(message, field.name).add() if field.is_repeated else None
    if child is None:
        child = getattr(message, field.name)
        child.SetInParent()
    _with_string(child, rest, value)


def _json_with(path: tuple[FieldDescriptor, ...], value: Any) -> dict[str, Any]:
    field, rest = path[0], path[1:]
    inner: Any = value if not rest else _json_with(rest, value)
    return {field.json_name: [inner] if field.is_repeated else inner}


def _cases() -> Iterator[tuple[Method, tuple[FieldDescriptor, ...]]]:
    for method in methods():
        for path in _string_paths(method.request.DESCRIPTOR):
            yield method, path


CASES = list(_cases())


@pytest.fixture
async def server(db_url: str, tmp_path: Path) -> AsyncIterator[RunningServer]:
    running = await start_server(
        db_url, tmp_path, http_listen="127.0.0.1:0", dispatch_enabled=False
    )
    try:
        yield running
    finally:
        await running.stop()


def _quiet(caplog: pytest.LogCaptureFixture, calls: int) -> None:
    """At most one line per refused call, none of them a warning or an error."""
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not loud, [r.getMessage() for r in loud]
    assert len(caplog.records) <= calls


async def _grpc_call(server: RunningServer, method: Method, request: Message) -> Any:
    """As the operator, or as a producer for the calls only producers make."""
    try:
        return await _grpc_call_as(server, method, request, "oscar")
    except grpc.aio.AioRpcError as exc:
        if exc.code() != grpc.StatusCode.PERMISSION_DENIED:
            raise
    return await _grpc_call_as(server, method, request, "alice")


async def _grpc_call_as(server: RunningServer, method: Method, request: Message, who: str) -> Any:
    channel = grpc.aio.insecure_channel(server.target)
    try:
        metadata = (("authorization", f"Bearer {KEYS[who]}"),)
        if method.server_streaming:
            call = channel.unary_stream(
                method.path,
                request_serializer=type(request).SerializeToString,
                response_deserializer=method.response.FromString,
            )(request, metadata=metadata, timeout=10)
            return await call.read()
        unary = channel.unary_unary(
            method.path,
            request_serializer=type(request).SerializeToString,
            response_deserializer=method.response.FromString,
        )
        return await unary(request, metadata=metadata, timeout=10)
    finally:
        await channel.close()


async def test_a_nul_in_any_string_of_any_request_names_the_field(
    server: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    strings = [(m, p) for m, p in CASES if p[-1].type == FieldDescriptor.TYPE_STRING]
    assert len(strings) > 60  # the walk reaches every service's fields
    for method, path in strings:
        request = method.request()
        _with_string(request, path, "a\x00b")
        name = _proto_name(path)
        try:
            answer = await _grpc_call(server, method, request)
        except grpc.aio.AioRpcError as exc:
            error = rich_error(exc)
        else:
            # BatchSendNotifications refuses the item, not the batch.
            assert method.path.endswith("/BatchSendNotifications"), (method.path, name)
            error = rich_status(answer.results[0].error)
            name = name.removeprefix("requests[0].")
        assert (error.code, error.reason) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_REQUEST",
        ), (method.path, name, error)
        assert name in error.violations, (method.path, name, error.violations)
    _quiet(caplog, len(strings))


async def test_a_lone_surrogate_in_any_json_field_names_it_before_anything_else(
    server: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Enums too: protobuf's JSON parser failed on one with a SystemError (500, and a
    29-line traceback per request, before authentication)."""
    caplog.set_level(logging.INFO)
    url = f"http://127.0.0.1:{server.app.http_port}"
    unary = [(m, p) for m, p in CASES if not m.server_streaming]
    async with aiohttp.ClientSession(url) as session:
        for method, path in unary:
            body = json.dumps(_json_with(path, "x\ud800"))  # ensure_ascii: "\ud800"
            for who in ("oscar", None):  # refused before authentication too
                headers = {"Content-Type": "application/json"}
                if who:
                    headers["Authorization"] = f"Bearer {KEYS[who]}"
                async with session.post(method.path, data=body, headers=headers) as response:
                    answer = await response.json()
                    assert response.status == 400, (method.path, _json_name(path), answer)
                info, bad = (d["debug"] for d in answer["details"])
                assert info["reason"] == "INVALID_REQUEST"
                assert info["metadata"]["fields"] == _json_name(path)
                assert bad["fieldViolations"][0]["field"] == _json_name(path)
        # A key with one names the object holding it.
        async with session.post(
            "/uns.v1.NotificationService/SendNotification",
            data='{"metadata": {"\\udc00": 1}}',
            headers={"Content-Type": "application/json"},
        ) as response:
            assert response.status == 400
            assert "metadata" in (await response.json())["message"]
    _quiet(caplog, 0)


def _far(year: int) -> Timestamp:
    if year >= 9999:
        return Timestamp(seconds=253402300799, nanos=999_999_999)  # 9999-12-31T23:59:59.999…
    return Timestamp(seconds=-62135596800)  # 0001-01-01T00:00:00Z


async def test_instants_at_the_ends_of_the_range_and_long_time_zones(
    server: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    people = operator_stub(server, rpb_grpc.RecipientServiceStub)
    refused: list[tuple[str, grpc.aio.AioRpcError]] = []

    async def refusal(field: str, call: Any) -> None:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call
        refused.append((field, caught.value))

    # A time zone longer than any file name: OSError inside zoneinfo, once "database
    # unreachable" (503).
    long_zone = "Europe/" + "x" * 300
    await refusal(
        "recipient.time_zone",
        people.PutRecipient(
            rpb.PutRecipientRequest(
                recipient=rpb.Recipient(recipient_id="ann", display_name="Ann", time_zone=long_zone)
            )
        ),
    )
    await refusal(
        "recipient.quiet_hours.time_zone",
        people.PutRecipient(
            rpb.PutRecipientRequest(
                recipient=rpb.Recipient(
                    recipient_id="ann",
                    display_name="Ann",
                    time_zone="UTC",
                    quiet_hours={"time_zone": long_zone, "start": "22:00", "end": "07:00"},
                )
            )
        ),
    )
    await refusal(
        "rotation.time_zone",
        people.PutRotation(
            rpb.PutRotationRequest(
                rotation=rpb.Rotation(
                    rotation_id="r",
                    members=["ann"],
                    start_time=timestamp(datetime(2026, 1, 1, tzinfo=UTC)),
                    shift=minutes(60),
                    time_zone="/" * 300,
                )
            )
        ),
    )
    await people.PutRecipient(
        rpb.PutRecipientRequest(
            recipient=rpb.Recipient(recipient_id="ann", display_name="Ann", time_zone="UTC")
        )
    )
    await people.PutRotation(
        rpb.PutRotationRequest(
            rotation=rpb.Rotation(
                rotation_id="r",
                members=["ann"],
                start_time=timestamp(datetime(2026, 1, 1, tzinfo=UTC)),
                shift=minutes(60),
                time_zone="UTC",
            )
        )
    )
    for year in (9999, 1):
        await refusal(
            "time", people.GetOnCall(rpb.GetOnCallRequest(rotation_id="r", time=_far(year)))
        )
        rotation = rpb.Rotation(
            rotation_id="r2",
            members=["ann"],
            start_time=_far(year),
            shift=minutes(60),
            time_zone="UTC",
            overrides=[rpb.RotationOverride(recipient_id="ann", start_time=_far(year))],
        )
        rotation.overrides[0].end_time.CopyFrom(_far(9999))
        await refusal(
            "rotation.start_time", people.PutRotation(rpb.PutRotationRequest(rotation=rotation))
        )
        await refusal(
            "rotation.overrides[0].end_time",
            people.PutRotation(rpb.PutRotationRequest(rotation=rotation)),
        )
    # A scheduled send at the end of time is too far ahead; at its start, "now".
    notifications = server.stub("alice")
    request = npb.SendNotificationRequest(
        notification_type="demo.alert", intent=2, title="t", message="m", source="s"
    )
    request.schedule_time.CopyFrom(_far(9999))
    await refusal("schedule_time", notifications.SendNotification(request))
    request.schedule_time.CopyFrom(_far(1))
    sent = await notifications.SendNotification(request)
    assert sent.notification_id
    # GetOnCall within the range still answers.
    answer = await people.GetOnCall(
        rpb.GetOnCallRequest(rotation_id="r", time=timestamp(datetime(8999, 1, 1, tzinfo=UTC)))
    )
    assert answer.recipient_id == "ann"

    # The same refusals as JSON over HTTP (the bridge answers with the gRPC method's).
    url = f"http://127.0.0.1:{server.app.http_port}"
    headers = {"Authorization": f"Bearer {KEYS['oscar']}"}
    over_http = [
        (
            "/uns.v1.RecipientService/GetOnCall",
            {"rotationId": "r", "time": "9999-12-31T23:59:59Z"},
            "time",
        ),
        (
            "/uns.v1.RecipientService/PutRecipient",
            {"recipient": {"recipientId": "ann", "displayName": "Ann", "timeZone": long_zone}},
            "recipient.time_zone",
        ),
        (
            "/uns.v1.RecipientService/PutRecipient",
            {"recipient": {"recipientId": "ann", "displayName": "A\u0000nn", "timeZone": "UTC"}},
            "recipient.display_name",
        ),
    ]
    async with aiohttp.ClientSession(url) as session:
        for path, body, field in over_http:
            async with session.post(path, json=body, headers=headers) as response:
                answer = await response.json()
                assert response.status == 400, (path, answer)
            info, bad = (d["debug"] for d in answer["details"])
            assert info["reason"] == "INVALID_REQUEST", answer
            assert field in [v["field"] for v in bad["fieldViolations"]], answer

    for field, exc in refused:
        error = rich_error(exc)
        assert (error.code, error.reason) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_REQUEST",
        ), (field, error)
        assert field in error.violations, (field, error.violations)
    _quiet(caplog, len(refused) + len(over_http))
