"""watch(): events in sequence order, filters, and resuming across a server restart with no
gap and no duplicate."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.clients.helpers import (
    collect_until,
    config_for,
    send_fields,
    start_server_on,
)
from tests.support.server import RunningServer, start_server
from uns.v1 import types_pb2 as t
from uns_clients import AsyncClient, EventStream, InvalidRequest, Unauthenticated
from uns_server.store.db import Database
from uns_server.store.events import SqlEventReads

AsyncClients = Callable[[str], AsyncClient]
DELIVERED_KINDS = [
    t.EVENT_KIND_ACCEPTED,
    t.EVENT_KIND_ATTEMPT_STARTED,
    t.EVENT_KIND_CHANNEL_ATTEMPT_STARTED,
    t.EVENT_KIND_CHANNEL_ATTEMPT_RESULT,
    t.EVENT_KIND_DELIVERY_RESULT,
]


def delivered(*ids: str) -> Callable[[list[t.Event]], bool]:
    wanted = set(ids)
    return lambda seen: (
        wanted <= {e.notification_id for e in seen if e.kind == t.EVENT_KIND_DELIVERY_RESULT}
    )


async def stored_events(db_url: str, notification_id: str) -> list[tuple[int, str]]:
    db = Database(db_url)
    try:
        async with db.read() as conn:
            rows = await SqlEventReads(conn).read_after(
                0, limit=1000, notification_ids=[notification_id]
            )
    finally:
        await db.dispose()
    return [(e.sequence, e.kind.value) for e in rows]


def as_stored(events: list[t.Event]) -> list[tuple[int, str]]:
    return [(e.sequence, t.EventKind.Name(e.kind).removeprefix("EVENT_KIND_")) for e in events]


async def test_events_of_a_notification_in_sequence_order(
    server: RunningServer, async_client: AsyncClients
) -> None:
    alice = async_client("alice")
    sent = await alice.send(**send_fields(wait_for_first_attempt=True))
    async with alice.watch(notification_ids=[sent.notification_id], replay_history=True) as stream:
        seen = await collect_until(stream, delivered(sent.notification_id))
        assert isinstance(stream, EventStream)
        assert stream.cursor == seen[-1].sequence
    assert [e.kind for e in seen] == DELIVERED_KINDS
    assert all(e.notification_id == sent.notification_id for e in seen)
    sequences = [e.sequence for e in seen]
    assert sequences == sorted(set(sequences))
    assert as_stored(seen) == await stored_events(
        server.app.settings.database_url, sent.notification_id
    )


async def test_live_stream_with_filters_and_a_start_cursor(
    server: RunningServer, async_client: AsyncClients
) -> None:
    alice = async_client("alice")
    before = await alice.send(**send_fields(notification_type="demo.watched"))
    async with alice.watch(replay_history=True, kinds=["ACCEPTED"]) as stream:
        (accepted,) = await collect_until(stream, lambda seen: len(seen) == 1)
    assert accepted.notification_id == before.notification_id

    # Resume after the ACCEPTED event: only later matching events, type- and kind-filtered.
    stream = alice.watch(
        after_sequence=accepted.sequence,
        notification_type="demo.watched",
        kinds=[t.EVENT_KIND_DELIVERY_RESULT, "ACKED"],
    )
    async with stream:
        other = await alice.send(**send_fields(notification_type="demo.ignored"))
        later = await alice.send(**send_fields(notification_type="demo.watched"))
        seen = await collect_until(stream, delivered(before.notification_id, later.notification_id))
    assert {e.kind for e in seen} == {t.EVENT_KIND_DELIVERY_RESULT}
    assert other.notification_id not in {e.notification_id for e in seen}
    assert all(e.sequence > accepted.sequence for e in seen)


async def test_positioned_stream_from_now_gets_what_is_sent_after_it(
    server: RunningServer, async_client: AsyncClients
) -> None:
    alice = async_client("alice")
    earlier = await alice.send(**send_fields(notification_type="demo.positioned"))
    replay = alice.watch(
        notification_ids=[earlier.notification_id], kinds=["ACCEPTED"], replay_history=True
    )
    async with replay:
        # The first response replays the ACCEPTED event: kept for the iteration, and the
        # cursor stays before it until it is yielded.
        assert await replay.positioned() == 0
        (accepted,) = await collect_until(replay, lambda seen: len(seen) == 1)
        assert accepted.notification_id == earlier.notification_id
        assert replay.cursor == accepted.sequence

    async with alice.watch(notification_type="demo.positioned", kinds=["ACCEPTED"]) as stream:
        # "From now": placed at the server's high-water mark, past what was committed.
        assert await stream.positioned() >= accepted.sequence
        later = await alice.send(**send_fields(notification_type="demo.positioned"))
        (event,) = await collect_until(stream, lambda seen: len(seen) == 1)
    assert event.notification_id == later.notification_id


async def test_watch_refusals_are_typed(server: RunningServer, async_client: AsyncClients) -> None:
    with pytest.raises(Unauthenticated):  # every role may watch (its own tenants)
        await anext(async_client("uns_not_a_key_of_this_server").watch())
    with pytest.raises(InvalidRequest) as exc:
        await anext(async_client("alice").watch(notification_ids=["not-a-uuid"]))
    assert exc.value.violations
    with pytest.raises(ValueError):
        async_client("alice").watch(kinds=["NOT_A_KIND"])


async def test_close_ends_a_waiting_iteration(
    server: RunningServer, async_client: AsyncClients
) -> None:
    alice = async_client("alice")
    stream = alice.watch()
    waiting = asyncio.ensure_future(anext(stream, None))
    await asyncio.sleep(0.2)
    await stream.aclose()
    assert await asyncio.wait_for(waiting, 5) is None
    assert stream.closed


async def test_resumes_after_server_restart_without_gaps_or_duplicates(
    db_url: str, tmp_path: Path
) -> None:
    """An operator watches everything. The server stops (streams end with UNAVAILABLE) and
    a new one starts on the same port; notifications sent meanwhile and afterwards must
    arrive exactly once, in order, as the database recorded them."""
    first = await start_server(db_url, tmp_path, watch_heartbeat_seconds=0.2)
    port = first.app.port
    running = [first]
    # Slow reconnects, so events commit while the watcher is disconnected.
    watcher = AsyncClient(
        config_for(
            first.target,
            "oscar",
            retry_initial_backoff_seconds=0.8,
            retry_max_backoff_seconds=1.5,
        )
    )
    producer = AsyncClient(config_for(first.target, "alice", retry_max_attempts=50))
    try:
        stream = watcher.watch(replay_history=True)
        before = [
            (await producer.send(**send_fields(wait_for_first_attempt=True))).notification_id
            for _ in range(3)
        ]
        seen = await collect_until(stream, delivered(*before))
        cursor_at_stop = stream.cursor

        await running.pop().stop()
        reading = asyncio.ensure_future(
            collect_until(stream, lambda evs: len(evs) >= 1, within=60)
        )  # sees UNAVAILABLE, backs off, reconnects
        running.append(await start_server_on(db_url, tmp_path, port, watch_heartbeat_seconds=0.2))
        during = [
            (await producer.send(**send_fields(wait_for_first_attempt=True))).notification_id
            for _ in range(3)
        ]
        seen += await reading
        seen += await collect_until(stream, delivered(*during))
        after = [
            (await producer.send(**send_fields(wait_for_first_attempt=True))).notification_id
            for _ in range(2)
        ]
        seen += await collect_until(stream, delivered(*after))
        assert stream.reconnects >= 1
        await stream.aclose()
    finally:
        await watcher.close()
        await producer.close()
        for srv in running:
            await srv.stop()

    sequences = [e.sequence for e in seen]
    assert sequences == sorted(set(sequences)), "reordered or duplicated events"
    assert min(e.sequence for e in seen if e.notification_id in during) > cursor_at_stop
    for notification_id in before + during + after:
        mine = [e for e in seen if e.notification_id == notification_id]
        assert as_stored(mine) == await stored_events(db_url, notification_id)
        assert [e.kind for e in mine] == DELIVERED_KINDS
