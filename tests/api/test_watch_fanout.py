"""How the EventHub fans an event out: only to the subscriptions whose filter matches
it (indexed by principal and by distinct filter), as one shared item that the API
encodes once for every stream it reaches. A filtered stream is woken for its own
events only, so it still gets its heartbeats while other traffic flows."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import text

from tests.support.server import send_request, start_server
from tests.support.watching import positioned
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t
from uns_server.api import convert
from uns_server.domain.enums import EventKind
from uns_server.domain.records import Event
from uns_server.services.watch import EventHub, Subscription, WatchFilter, WatchItem


class _NoDatabase:
    """A store the hub never reads from: these tests publish to it directly."""

    def on_commit(self, _topic: str, _callback: Callable[[], None]) -> None:
        pass

    def event_tail(self) -> None:
        return None


def _item(
    sequence: int,
    principal: str,
    kind: str = "ACCEPTED",
    type_: str = "a",
    payload: dict[str, object] | None = None,
) -> WatchItem:
    return WatchItem(
        Event(
            sequence=sequence,
            id=f"e{sequence}",
            notification_id=f"n{sequence}",
            principal=principal,
            notification_type=type_,
            kind=EventKind(kind),
            at=datetime(2026, 1, 1, tzinfo=UTC),
            payload={"k": sequence} if payload is None else payload,
        )
    )


def _filter(principal: str | None, kinds: tuple[str, ...] = (), type_: str = "") -> WatchFilter:
    principals = None if principal is None else frozenset({principal})
    return WatchFilter(principals, frozenset(), frozenset(kinds), type_)


def _sequences(sub: Subscription) -> list[int]:
    return [item.sequence for item in sub.queue]


async def test_events_reach_only_matching_subscriptions_as_one_shared_item() -> None:
    hub = EventHub(_NoDatabase(), queue_max=10)  # type: ignore[arg-type]
    alice_all = [hub.subscribe(_filter("alice"), 60) for _ in range(3)]
    alice_type_b = hub.subscribe(_filter("alice", type_="b"), 60)
    alice_failed = hub.subscribe(_filter("alice", kinds=("FAILED",)), 60)
    bob = hub.subscribe(_filter("bob"), 60)
    operator = hub.subscribe(_filter(None), 60)
    operator_bob = hub.subscribe(WatchFilter(None, frozenset({"n3"}), frozenset(), ""), 60)
    try:
        first, second, third = _item(1, "alice"), _item(2, "alice", type_="b"), _item(3, "bob")
        for item in (first, second, third):
            hub.publish(item)
        for sub in alice_all:
            assert _sequences(sub) == [1, 2]
            assert sub.queue[0] is first  # shared, not copied per stream
        assert _sequences(alice_type_b) == [2]
        assert _sequences(alice_failed) == []
        assert _sequences(bob) == [3]
        assert _sequences(operator) == [1, 2, 3]
        assert _sequences(operator_bob) == [3]
        # Encoded once: every stream sends the same message object.
        message = convert.watch_event(first)
        assert convert.watch_event(alice_all[1].queue[0]) is message
        assert message.event.sequence == 1 and message.event.kind == t.EVENT_KIND_ACCEPTED
    finally:
        for sub in [*alice_all, alice_type_b, alice_failed, bob, operator, operator_bob]:
            hub.unsubscribe(sub)
    assert hub.subscribers == 0
    hub.publish(_item(4, "alice"))  # nobody left: nothing to do, nothing kept


def test_non_operator_streams_share_one_encoding_without_addresses() -> None:
    """People's contacts are personal data (issue 42): an event naming no person's
    address is the one shared encoding for every stream; one that does gets a second
    encoding, built once and shared by every non-operator stream, and the operator's
    keeps the address."""
    plain = _item(1, "alice")
    shared = convert.watch_event(plain)
    assert convert.watch_event(plain, personal=False) is shared
    payload = {
        "recipient_id": "dave",
        "provider_reference": {"recipient": "email:dave@example.com", "recipient_id": "dave"},
    }
    person = _item(2, "alice", kind="CHANNEL_ATTEMPT_RESULT", payload=payload)
    redacted = convert.watch_event(person, personal=False)
    assert convert.watch_event(person, personal=False) is redacted
    full = convert.watch_event(person)
    assert full is not redacted and convert.watch_event(person) is full
    assert full.event.payload["provider_reference"]["recipient"] == "email:dave@example.com"
    assert redacted.event.payload["provider_reference"]["recipient"] == "recipient:dave"
    assert "dave@example.com" not in str(redacted)


async def test_a_full_queue_overflows_to_the_table() -> None:
    hub = EventHub(_NoDatabase(), queue_max=2)  # type: ignore[arg-type]
    sub = hub.subscribe(_filter("alice"), 60)
    try:
        for sequence in (1, 2, 3):
            hub.publish(_item(sequence, "alice"))
        assert sub.overflowed and not sub.queue
        assert hub.total_overflows == 1
        async with asyncio.timeout(5):
            await sub.wait()  # an overflow does not leave the stream asleep
    finally:
        hub.unsubscribe(sub)
    assert hub.total_overflows == 1  # kept after the stream ends


async def test_a_queue_is_bounded_in_bytes_too() -> None:
    """Large events overflow a slow subscriber's queue long before its event count."""
    hub = EventHub(_NoDatabase(), queue_max=1000, queue_max_bytes=3000)  # type: ignore[arg-type]
    sub = hub.subscribe(_filter("alice"), 60)
    try:
        small = _item(1, "alice")
        hub.publish(small)
        assert sub.queued_bytes == small.size
        hub.publish(_item(2, "alice"))
        assert _sequences(sub) == [1, 2]
        sub.pop()
        assert sub.queued_bytes == small.size  # what leaves the queue stops counting
        big = _item(3, "alice")
        big.size = 2500
        hub.publish(big)
        assert sub.overflowed and not sub.queue and sub.queued_bytes == 0
    finally:
        hub.unsubscribe(sub)
    assert hub.total_overflows == 1


async def test_filtered_stream_gets_heartbeats_while_other_events_flow(
    db_url: str, tmp_path: Path
) -> None:
    server = await start_server(
        db_url, tmp_path, dispatch_enabled=False, watch_heartbeat_seconds=0.2
    )
    call = server.stub("alice").WatchEvents(
        pb.WatchEventsRequest(notification_type="nothing.matches"), timeout=None
    )
    stop = asyncio.Event()

    async def send_until_stopped() -> int:
        sent = 0
        while not stop.is_set():
            await server.stub("alice").SendNotification(send_request(idempotency_key=f"k{sent}"))
            sent += 1
            await asyncio.sleep(0.02)
        return sent

    try:
        first = await anext(aiter(call))  # the stream's position
        assert first.HasField("heartbeat")
        sender = asyncio.create_task(send_until_stopped())
        async with server.app.store.read() as tx:
            before = await tx.events.high_water()
        # Every heartbeat is a bookmark past the events this stream does not match.
        highest = first.heartbeat.high_water_sequence
        async with asyncio.timeout(60):
            while highest <= before:
                response = await anext(aiter(call))
                assert response.HasField("heartbeat")
                assert response.heartbeat.high_water_sequence >= highest
                highest = response.heartbeat.high_water_sequence
        stop.set()
        assert await sender > 0
    finally:
        stop.set()
        call.cancel()
        await server.stop()


async def test_hub_replaces_a_broken_connection_without_losing_events(
    db_url: str, tmp_path: Path
) -> None:
    """On PostgreSQL the hub reads through one kept connection; when the server ends it
    (restart, failover, admin), the next wake-up reconnects and nothing is missed."""
    server = await start_server(db_url, tmp_path, dispatch_enabled=False)
    call = server.stub("alice").WatchEvents(
        pb.WatchEventsRequest(kinds=[t.EVENT_KIND_ACCEPTED]), timeout=None
    )
    stream = aiter(call)

    async def next_event() -> str:
        async with asyncio.timeout(60):
            while not (response := await anext(stream)).HasField("event"):
                pass
        return response.event.notification_id

    try:
        # The stream starts "from now" (SPEC): send only once the server has placed it
        # (its first heartbeat), or the first event can commit before the stream's start
        # and never come.
        assert await positioned(call) == []
        first = await server.stub("alice").SendNotification(send_request(idempotency_key="1"))
        assert await next_event() == first.notification_id
        if server.app.db.dialect == "postgresql":
            async with server.app.db.read() as conn:
                ended = await conn.scalar(
                    text(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                        "AND backend_type = 'client backend' AND query LIKE '%uns_events%'"
                    )
                )
            assert ended
        second = await server.stub("alice").SendNotification(send_request(idempotency_key="2"))
        assert await next_event() == second.notification_id
    finally:
        call.cancel()
        await server.stop()
