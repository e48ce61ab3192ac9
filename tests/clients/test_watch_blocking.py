"""Client.watch(): the blocking stream, on the same resume rules as the async one.

The server runs on the test's event loop, so every blocking call runs in a thread
(``asyncio.to_thread``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from tests.clients.helpers import config_for, send_fields, start_server_on
from tests.support.server import RunningServer, start_server
from uns.v1 import types_pb2 as t
from uns_clients import BlockingEventStream, Client

SyncClients = Callable[[str], Client]
WITHIN = 30.0


def take(stream: BlockingEventStream, count: int) -> list[t.Event]:
    return [next(stream) for _ in range(count)]


async def test_positioned_from_now_then_events_in_order(
    server: RunningServer, sync_client: SyncClients
) -> None:
    alice = sync_client("alice")
    earlier = await asyncio.to_thread(alice.send, **send_fields(notification_type="demo.sync"))
    stream = alice.watch(notification_type="demo.sync", kinds=["ACCEPTED"])
    with stream:
        start = await asyncio.to_thread(stream.positioned)
        assert start > 0  # the server's high water, past `earlier`: the stream has its start
        sent = [
            await asyncio.to_thread(alice.send, **send_fields(notification_type="demo.sync"))
            for _ in range(3)
        ]
        seen = await asyncio.wait_for(asyncio.to_thread(take, stream, 3), WITHIN)
        assert stream.cursor == seen[-1].sequence
    assert [e.notification_id for e in seen] == [s.notification_id for s in sent]
    assert earlier.notification_id not in {e.notification_id for e in seen}
    assert start < seen[0].sequence < seen[1].sequence < seen[2].sequence
    assert stream.closed


async def test_close_from_another_thread_ends_a_waiting_iteration(
    server: RunningServer, sync_client: SyncClients
) -> None:
    stream = sync_client("alice").watch()
    await asyncio.to_thread(stream.positioned)
    waiting = asyncio.ensure_future(asyncio.to_thread(next, stream, None))
    await asyncio.sleep(0.2)
    assert not waiting.done()
    await asyncio.to_thread(stream.close)
    assert await asyncio.wait_for(waiting, 5) is None
    assert stream.closed


async def test_resumes_after_server_restart_without_gaps_or_duplicates(
    db_url: str, tmp_path: Path
) -> None:
    first = await start_server(db_url, tmp_path, watch_heartbeat_seconds=0.2)
    port = first.app.port
    running = [first]
    watcher = Client(config_for(first.target, "oscar", retry_initial_backoff_seconds=0.5))
    producer = Client(config_for(first.target, "alice", retry_max_attempts=50))
    stream = watcher.watch(kinds=["ACCEPTED"], replay_history=True)
    try:
        before = await asyncio.to_thread(producer.send, **send_fields())
        (seen,) = await asyncio.wait_for(asyncio.to_thread(take, stream, 1), WITHIN)
        assert seen.notification_id == before.notification_id

        await running.pop().stop()
        reading = asyncio.ensure_future(asyncio.to_thread(take, stream, 2))
        running.append(await start_server_on(db_url, tmp_path, port, watch_heartbeat_seconds=0.2))
        during = [await asyncio.to_thread(producer.send, **send_fields()) for _ in range(2)]
        later = await asyncio.wait_for(reading, 60)
    finally:
        await asyncio.to_thread(watcher.close)
        await asyncio.to_thread(producer.close)
        for srv in running:
            await srv.stop()
    assert [e.notification_id for e in later] == [d.notification_id for d in during]
    assert seen.sequence < later[0].sequence < later[1].sequence
    assert stream.reconnects >= 1 and stream.closed
