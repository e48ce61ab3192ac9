"""A stream that registers while the idle EventHub is moving its tail loses nothing.

With no stream registered the hub does not read new events, it only moves its tail to
the committed max(sequence). A stream registering while that query is in flight may
take its catch-up snapshot *before* the query's: the hub must then read the rows as
usual instead of jumping past events the stream's snapshot did not see. The test holds
the hub's max() until the stream has caught up and another event has committed.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.support.server import send_request, start_server
from uns.v1 import notification_service_pb2 as pb

WITHIN = 10.0


async def test_stream_registering_during_the_idle_hubs_tail_move_misses_nothing(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = await start_server(db_url, tmp_path, dispatch_enabled=False)
    hub = server.app.hub
    held = asyncio.Event()
    release = asyncio.Event()
    original = hub._tail.high_water

    async def high_water() -> int:
        if not release.is_set():
            held.set()
            await release.wait()  # the max() runs only after the stream caught up
        return await original()

    monkeypatch.setattr(hub._tail, "high_water", high_water)
    alice = server.stub("alice")
    call = None
    try:
        await alice.SendNotification(send_request(idempotency_key="first"))
        await asyncio.wait_for(held.wait(), WITHIN)  # the idle hub is in its max()

        call = alice.WatchEvents(pb.WatchEventsRequest(after_sequence=1), timeout=None)
        received: list[str] = []
        first = await asyncio.wait_for(call.read(), WITHIN)
        while first.HasField("event"):  # catch-up, then the position heartbeat
            received.append(first.event.notification_id)
            first = await asyncio.wait_for(call.read(), WITHIN)

        second = await alice.SendNotification(send_request(idempotency_key="second"))
        release.set()

        async def until_second() -> None:
            while True:
                reply = await call.read()
                if reply.HasField("event"):
                    received.append(reply.event.notification_id)
                    if reply.event.notification_id == second.notification_id:
                        return

        await asyncio.wait_for(until_second(), WITHIN)
        assert second.notification_id in received
    finally:
        release.set()
        if call is not None:
            call.cancel()
        await server.stop()
