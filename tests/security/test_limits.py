"""Every input limit the API documents, at the limit and one past it (issue 8 item 3).

- request size: ``max_receive_message_bytes`` (default 1 MiB), enforced by the grpc
  transport: RESOURCE_EXHAUSTED *without* ErrorInfo (the service never sees the bytes).
- notification_type: 1-255 characters of ``[A-Za-z0-9._:-]``: INVALID_REQUEST.
- title, source, idempotency_key, dedup_key, correlation_id, agent_id: 255 characters;
  message: 16384 characters; NUL in any of them: INVALID_REQUEST.
- Replay / ResolveFailure reason: 1024 characters: INVALID_REQUEST.
- metadata (Send and Acknowledge): 16 KiB of compact JSON, 8 levels, finite numbers,
  no NUL: INVALID_REQUEST; reserved routing keys: RESERVED_METADATA_KEY. Nesting past
  protobuf's recursion limit cannot be decoded: INVALID_REQUEST on field ``request``.
- page_size of every List RPC: 0-1000 (0 means 50): INVALID_REQUEST.
- ListNotifications filter: 4096 characters: INVALID_REQUEST on ``filter``.
- WatchEvents: at most 1000 distinct notification_ids, after_sequence >= 0:
  INVALID_REQUEST; duplicate ids and kinds count once.
- concurrent WatchEvents streams per principal: ``watch_streams_per_principal``
  (default 100): RESOURCE_EXHAUSTED / TOO_MANY_STREAMS.

Lengths count Unicode code points, so the at-limit values use a 4-byte character.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2
from google.protobuf.message import Message

from tests.security.rpcs import (
    OK,
    UNKNOWN_ID,
    Caller,
    Callers,
    Outcome,
    refusal,
    row_counts,
)
from tests.support.server import RunningServer, send_request, start_server
from uns.v1 import audit_service_pb2 as apb
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import policy_service_pb2 as ppb
from uns.v1 import types_pb2 as t
from uns_server.domain.filters import FILTER_MAX_CHARS
from uns_server.settings import Settings, SettingsError

WIDE = "\U0001d11e"  # MUSICAL SYMBOL G CLEF: one character, four UTF-8 bytes
STREAM_LIMIT = 3


@pytest.fixture
async def server(db_url: str, tmp_path: Path) -> AsyncIterator[RunningServer]:
    running = await start_server(
        db_url, tmp_path, dispatch_enabled=False, watch_streams_per_principal=STREAM_LIMIT
    )
    try:
        yield running
    finally:
        await running.stop()


@pytest.fixture
async def callers(server: RunningServer) -> Callers:
    # Async so that the channel binds to the running loop, whatever an earlier test did
    # to the thread's default loop (asyncio.run() leaves none behind).
    return Callers(server)


def invalid(outcome: Outcome, field: str) -> bool:
    return (
        outcome.reason == "INVALID_REQUEST"
        and outcome.code == grpc.StatusCode.INVALID_ARGUMENT
        and outcome.error is not None
        and field in outcome.error.violations
    )


def nested(depth: int, *, lists: bool = False) -> dict[str, Any]:
    """Metadata ``depth`` containers deep (the metadata object itself is level 1)."""
    value: Any = "leaf"
    for _ in range(depth - 1):
        value = [value] if lists else {"a": value}
    return {"a": value}


def with_metadata(request: pb.SendNotificationRequest, metadata: dict[str, Any]) -> Any:
    request.metadata.update(metadata)
    return request


# --- request size --------------------------------------------------------------------


async def transport_refusal(caller: Caller, rpc: str, request: Message) -> grpc.aio.AioRpcError:
    """The error grpc itself answers (no ErrorInfo: the service never saw the request)."""
    try:
        if rpc == "NotificationService/WatchEvents":
            stream = caller.method(rpc)(request, metadata=caller.metadata, timeout=10)
            try:
                await anext(aiter(stream))
            finally:
                stream.cancel()
        else:
            await caller.method(rpc)(request, metadata=caller.metadata, timeout=10)
    except grpc.aio.AioRpcError as err:
        return err
    raise AssertionError(f"{rpc} was answered")


async def test_request_size_is_bounded_by_the_transport(
    server: RunningServer, callers: Callers
) -> None:
    alice = callers("alice")
    biggest_valid = send_request(
        notification_type="a" * 255,
        title=WIDE * 255,
        message=WIDE * 16384,
        source=WIDE * 255,
        idempotency_key=WIDE * 255,
        dedup_key=WIDE * 255,
        correlation_id=WIDE * 255,
        autonomy_context=t.AutonomyContext(agent_id=WIDE * 255),
        metadata={"k": "x" * (16 * 1024 - 8)},
    )
    assert biggest_valid.ByteSize() < 1024 * 1024
    assert (await alice.call("NotificationService/SendNotification", biggest_valid)).reason == OK

    before = await row_counts(server)
    for rpc, request in (
        ("NotificationService/SendNotification", send_request(message="x" * 2_000_000)),
        (
            "NotificationService/WatchEvents",
            pb.WatchEventsRequest(notification_ids=[str(uuid.uuid4()) for _ in range(60_000)]),
        ),
    ):
        err = await transport_refusal(alice, rpc, request)
        assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, rpc
        assert "larger than max" in (err.details() or "")
    assert await row_counts(server) == before


async def test_request_size_setting(db_url: str, tmp_path: Path) -> None:
    small = await start_server(
        db_url, tmp_path, dispatch_enabled=False, max_receive_message_bytes=8192
    )
    try:
        alice = Callers(small)("alice")
        ok = await alice.call("NotificationService/SendNotification", send_request())
        assert ok.reason == OK
        err = await transport_refusal(
            alice, "NotificationService/SendNotification", send_request(message="x" * 9000)
        )
        assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    finally:
        await small.stop()


# --- strings -------------------------------------------------------------------------

STRING_LIMITS = {
    "notification_type": 255,
    "title": 255,
    "message": 16384,
    "source": 255,
    "idempotency_key": 255,
    "dedup_key": 255,
    "correlation_id": 255,
    "autonomy_context.agent_id": 255,
}


def with_string(field: str, value: str) -> pb.SendNotificationRequest:
    if field == "autonomy_context.agent_id":
        return send_request(autonomy_context=t.AutonomyContext(agent_id=value))
    return send_request(**{field: value})


async def test_string_lengths_at_and_past_the_limit(
    server: RunningServer, callers: Callers
) -> None:
    alice = callers("alice")
    before = await row_counts(server)
    for field, limit in STRING_LIMITS.items():
        char = "a" if field == "notification_type" else WIDE  # the type is ASCII-only
        at_limit = await alice.call(
            "NotificationService/Simulate",
            pb.SimulateRequest(request=with_string(field, char * limit)),
        )
        assert at_limit.reason == OK, (field, at_limit)
        for bad in (char * (limit + 1), "a\x00b"):
            refused = await alice.call(
                "NotificationService/SendNotification", with_string(field, bad)
            )
            assert invalid(refused, field), (field, len(bad), refused)
            assert refused.error is not None and field in refused.error.metadata["fields"]
    # Required fields: empty and whitespace-only are missing.
    for field in ("notification_type", "title", "message", "source"):
        refused = await alice.call("NotificationService/SendNotification", with_string(field, " "))
        assert invalid(refused, field), field
    assert await row_counts(server) == before  # nothing refused was written


async def test_operator_reason_length(server: RunningServer, callers: Callers) -> None:
    alice, oscar = callers("alice"), callers("oscar")
    sent = await alice.call("NotificationService/SendNotification", send_request())
    nid = sent.response.notification_id
    for rpc, request_type in (
        ("NotificationService/Replay", pb.ReplayRequest),
        ("NotificationService/ResolveFailure", pb.ResolveFailureRequest),
    ):
        at_limit = await oscar.call(rpc, request_type(notification_id=nid, reason=WIDE * 1024))
        assert at_limit.reason == "NOT_DEAD_LETTERED", rpc  # validation passed
        past = await oscar.call(rpc, request_type(notification_id=nid, reason="r" * 1025))
        assert invalid(past, "reason"), rpc


# --- metadata ------------------------------------------------------------------------


async def test_metadata_size_depth_and_numbers(server: RunningServer, callers: Callers) -> None:
    alice, rita = callers("alice"), callers("rita")
    limit = 16 * 1024
    # Compact JSON of {"k":"<s>"} is len(s) + 8 bytes; "é" is two bytes.
    accepted = [
        {"k": "x" * (limit - 8)},
        {"k": "é" * ((limit - 8) // 2)},
        nested(8),
        nested(8, lists=True),
        {"n": 1e308, "m": -0.0, "z": None, "b": True},
    ]
    refused = [
        {"k": "x" * (limit - 7)},
        {"k": "é" * ((limit - 8) // 2 + 1)},
        nested(9),
        nested(9, lists=True),
        nested(30),
        {"k\x00": 1},
        {"k": "a\x00"},
    ]
    before = await row_counts(server)
    for metadata in accepted:
        got = await alice.call(
            "NotificationService/Simulate",
            pb.SimulateRequest(request=with_metadata(send_request(), metadata)),
        )
        assert got.reason == OK, (str(metadata)[:80], got)
    for metadata in refused:
        got = await alice.call(
            "NotificationService/SendNotification", with_metadata(send_request(), metadata)
        )
        assert invalid(got, "metadata"), (str(metadata)[:80], got)
        ack = pb.AcknowledgeRequest(notification_id=UNKNOWN_ID)
        ack.metadata.update(metadata)
        got = await rita.call("NotificationService/Acknowledge", ack)
        assert invalid(got, "metadata"), (str(metadata)[:80], got)  # checked before lookup
    for number in (float("nan"), float("inf"), float("-inf")):
        send = send_request()
        send.metadata.fields["x"].number_value = number
        assert invalid(await alice.call("NotificationService/SendNotification", send), "metadata")
        ack = pb.AcknowledgeRequest(notification_id=UNKNOWN_ID)
        ack.metadata.fields["x"].list_value.values.add().number_value = number
        assert invalid(await rita.call("NotificationService/Acknowledge", ack), "metadata")
    reserved = await alice.call(
        "NotificationService/SendNotification",
        with_metadata(send_request(), {"slack_channel": "#x", "email_to": "a@b"}),
    )
    assert reserved.reason == "RESERVED_METADATA_KEY"
    assert (
        reserved.error is not None and reserved.error.metadata["keys"] == "email_to,slack_channel"
    )
    assert await row_counts(server) == before


# Each Struct level is three protobuf message levels (Struct, map entry, Value); the
# parser stops at 100.
PAST_RECURSION_LIMIT = 40


def deepen(struct: struct_pb2.Struct, depth: int) -> None:
    """Nest Structs in place (copying a message this deep would fail client-side)."""
    for _ in range(depth):
        struct = struct.fields["a"].struct_value


async def test_nesting_past_the_protobuf_recursion_limit(
    server: RunningServer, callers: Callers
) -> None:
    """Too deep to decode at all: refused as INVALID_REQUEST (``request``), not UNKNOWN."""
    send = send_request()
    deepen(send.metadata, PAST_RECURSION_LIMIT)
    simulate = pb.SimulateRequest(request=send_request())
    deepen(simulate.request.metadata, PAST_RECURSION_LIMIT)
    ack = pb.AcknowledgeRequest(notification_id=UNKNOWN_ID)
    deepen(ack.metadata, PAST_RECURSION_LIMIT)
    request = send
    before = await row_counts(server)
    for who, rpc, message in (
        ("alice", "NotificationService/SendNotification", request),
        ("alice", "NotificationService/Simulate", simulate),
        ("rita", "NotificationService/Acknowledge", ack),
    ):
        got = await callers(who).call(rpc, message)
        assert invalid(got, "request"), (rpc, got)
    # Authentication and roles still come first.
    anonymous = await callers.raw(None).call("NotificationService/SendNotification", request)
    assert anonymous.reason == "UNAUTHENTICATED"
    wrong_role = await callers("rita").call("NotificationService/SendNotification", request)
    assert wrong_role.reason == "PERMISSION_DENIED"
    assert await row_counts(server) == before


# --- paging --------------------------------------------------------------------------


async def test_page_size_bounds(server: RunningServer, callers: Callers) -> None:
    oscar = callers("oscar")
    requests: dict[str, Any] = {
        "NotificationService/ListNotifications": lambda n: pb.ListNotificationsRequest(page_size=n),
        "PolicyService/ListPolicyRevisions": lambda n: ppb.ListPolicyRevisionsRequest(
            notification_type="demo.alert", page_size=n
        ),
        "AuditService/ListDeliveryAuditRecords": lambda n: apb.ListDeliveryAuditRecordsRequest(
            notification_id=UNKNOWN_ID, page_size=n
        ),
        "AuditService/ListAckAuditRecords": lambda n: apb.ListAckAuditRecordsRequest(
            notification_id=UNKNOWN_ID, page_size=n
        ),
    }
    for rpc, build in requests.items():
        # AIP-158: 0 is the default and a size above the maximum is coerced to it.
        for size in (0, 1, 1000, 1001, 2**31 - 1):
            assert (await oscar.call(rpc, build(size))).reason == OK, (rpc, size)
        for size in (-1, -(2**31)):
            refused = await oscar.call(rpc, build(size))
            assert invalid(refused, "page_size"), (rpc, size)
            # Every INVALID_REQUEST names its fields under the same ErrorInfo key.
            assert refused.error is not None and refused.error.metadata["fields"] == "page_size"


async def test_list_filter_length_and_quoting(server: RunningServer, callers: Callers) -> None:
    alice = callers("alice")
    rpc = "NotificationService/ListNotifications"
    sent = await alice.call(
        rpc.replace("ListNotifications", "SendNotification"),
        send_request(source='say "AND" \\ then'),
    )
    assert sent.reason == OK
    # A quoted value holds AND, escaped quotes and backslashes.
    found = await alice.call(
        rpc, pb.ListNotificationsRequest(filter='source = "say \\"AND\\" \\\\ then"')
    )
    assert found.reason == OK
    assert [n.source for n in found.response.notifications] == ['say "AND" \\ then']
    at_limit = 'source = "' + WIDE * (FILTER_MAX_CHARS - 11) + '"'
    assert len(at_limit) == FILTER_MAX_CHARS
    assert (await alice.call(rpc, pb.ListNotificationsRequest(filter=at_limit))).reason == OK
    past = await alice.call(rpc, pb.ListNotificationsRequest(filter=at_limit + " "))
    assert invalid(past, "filter")
    assert past.error is not None and str(FILTER_MAX_CHARS) in past.error.message


# --- WatchEvents filters -------------------------------------------------------------


async def test_watch_filter_bounds(server: RunningServer, callers: Callers) -> None:
    oscar = callers("oscar")
    ids = [str(uuid.uuid4()) for _ in range(1001)]
    ok: list[Message] = [
        pb.WatchEventsRequest(notification_ids=ids[:1000]),
        pb.WatchEventsRequest(notification_ids=[ids[0]] * 5000),  # duplicates count once
        # ~300k packed enum values fit in one request: each distinct kind counts once.
        pb.WatchEventsRequest(kinds=[t.EVENT_KIND_ACKED, t.EVENT_KIND_TIMED_OUT] * 150_000),
    ]
    for request in ok:
        assert (await oscar.call("NotificationService/WatchEvents", request)).reason == OK
    too_many = await oscar.call(
        "NotificationService/WatchEvents", pb.WatchEventsRequest(notification_ids=ids)
    )
    assert invalid(too_many, "notification_ids")
    negative = await oscar.call(
        "NotificationService/WatchEvents", pb.WatchEventsRequest(after_sequence=-1)
    )
    assert invalid(negative, "after_sequence")
    unknown_kind = await oscar.call(
        "NotificationService/WatchEvents", pb.WatchEventsRequest(kinds=[t.EVENT_KIND_ACKED, 999])
    )
    assert invalid(unknown_kind, "kinds[1]")
    assert unknown_kind.error is not None and unknown_kind.error.metadata["fields"] == "kinds[1]"
    # A cursor past the newest event was never this database's: refused with where the
    # timeline really ends, rather than silently skipping the events that will take it.
    sent = await callers("alice").call("NotificationService/SendNotification", send_request())
    assert sent.reason == OK
    now = await oscar.call("NotificationService/WatchEvents", pb.WatchEventsRequest())
    newest = now.response.heartbeat.high_water_sequence  # a stream "from now" starts there
    assert newest > 0
    at_head = await oscar.call(
        "NotificationService/WatchEvents", pb.WatchEventsRequest(after_sequence=newest)
    )
    assert at_head.reason == OK
    for cursor in (newest + 1, 2**63 - 1):
        ahead = await oscar.call(
            "NotificationService/WatchEvents", pb.WatchEventsRequest(after_sequence=cursor)
        )
        assert invalid(ahead, "after_sequence")
        assert ahead.error is not None
        assert ahead.error.metadata["high_water_sequence"] == str(newest)


# --- concurrent streams per principal ------------------------------------------------


def test_stream_limit_setting() -> None:
    assert Settings().watch_streams_per_principal == 100
    configured = Settings.from_env({"UNS_WATCH_STREAMS_PER_PRINCIPAL": "7"})
    assert configured.watch_streams_per_principal == 7
    with pytest.raises(SettingsError, match="watch_streams_per_principal"):
        Settings.from_env({}, watch_streams_per_principal=0)


class Streams:
    """WatchEvents streams held open: each has sent its first message, so the server
    counts it."""

    def __init__(self, caller: Caller) -> None:
        self.caller = caller
        self.open: list[Any] = []

    async def open_one(self, rpc_timeout: float | None = None) -> Outcome:
        stream = self.caller.method("NotificationService/WatchEvents")(
            pb.WatchEventsRequest(), metadata=self.caller.metadata, timeout=rpc_timeout
        )
        try:
            first = await anext(aiter(stream))
        except grpc.aio.AioRpcError as err:
            return refusal(err)
        assert first.HasField("heartbeat")
        self.open.append(stream)
        return Outcome(OK, grpc.StatusCode.OK, response=first)

    def close_one(self) -> None:
        self.open.pop().cancel()

    def close_all(self) -> None:
        while self.open:
            self.close_one()


async def open_when_released(streams: Streams, within: float = 10.0) -> None:
    """A slot is given back once the server has seen the cancellation; wait for that."""
    async with asyncio.timeout(within):
        # Polling is the only way: the server sends nothing when it releases a slot.
        while (outcome := await streams.open_one()).reason == "TOO_MANY_STREAMS":  # noqa: ASYNC110
            await asyncio.sleep(0.05)
    assert outcome.reason == OK, outcome


async def test_concurrent_watch_streams_per_principal(
    server: RunningServer, callers: Callers
) -> None:
    alice, bob, oscar = (
        Streams(callers("alice")),
        Streams(callers("bob")),
        Streams(callers("oscar")),
    )
    try:
        for _ in range(STREAM_LIMIT):
            assert (await alice.open_one()).reason == OK
        refused = await alice.open_one()
        assert (refused.code, refused.reason) == (
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "TOO_MANY_STREAMS",
        )
        assert refused.error is not None
        assert refused.error.metadata == {
            "scope": "principal",
            "principal": "alice",
            "open_streams": str(STREAM_LIMIT),
            "limit": str(STREAM_LIMIT),
        }
        # The limit is per principal: others are unaffected, operators included.
        assert (await bob.open_one()).reason == OK
        assert (await oscar.open_one()).reason == OK
        # Refused and invalid attempts hold no slot.
        for _ in range(5):
            assert (await alice.open_one()).reason == "TOO_MANY_STREAMS"
        bad = await alice.caller.call(
            "NotificationService/WatchEvents", pb.WatchEventsRequest(after_sequence=-5)
        )
        assert bad.reason == "INVALID_REQUEST"
        # A cancelled stream gives its slot back.
        alice.close_one()
        await open_when_released(alice)
        assert (await alice.open_one()).reason == "TOO_MANY_STREAMS"
    finally:
        for streams in (alice, bob, oscar):
            streams.close_all()


async def test_ended_streams_give_their_slot_back(server: RunningServer, callers: Callers) -> None:
    """Deadline expiry and many open/close cycles leave no slot behind."""
    alice = Streams(callers("alice"))
    try:
        for _ in range(4 * STREAM_LIMIT):
            await open_when_released(alice)
            alice.close_one()
        short = Streams(callers("alice"))
        for _ in range(STREAM_LIMIT):
            assert (await short.open_one(rpc_timeout=0.5)).reason == OK
        for stream in short.open:
            with pytest.raises(grpc.aio.AioRpcError) as exc:
                async for _ in stream:
                    pass
            assert exc.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        short.open.clear()
        for _ in range(STREAM_LIMIT):
            await open_when_released(alice)
    finally:
        alice.close_all()
