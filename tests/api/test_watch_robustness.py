"""WatchEvents under concurrency, checked like etcd's robustness suite validates
watchers: ordered, unique, bookmarkable, reliable (no gaps) and resumable — while
eight writers commit concurrently and subscribers drop and resume at random points.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from tests.support.server import RunningServer, send_request, start_server
from uns.v1 import notification_service_pb2 as pb
from uns_server.store.db import Database
from uns_server.store.events import SqlEventReads

WRITERS = 8
SENDS_PER_WRITER = 40  # each send yields ~5 events: ~1,600 events in all
SUBSCRIBERS = 4
SEED = 20261129


@dataclass
class Subscriber:
    name: str
    rng: random.Random
    cursor: int = 0
    received: list[tuple[int, str]] = field(default_factory=list)  # (sequence, event id)
    reconnects: int = 0
    violations: list[str] = field(default_factory=list)

    async def run(self, server: RunningServer, stop: asyncio.Event, final: list[int]) -> None:
        client = server.stub("oscar")
        while not (stop.is_set() and final and self.cursor >= final[0]):
            budget = self.rng.randint(1, 150)  # messages before we drop the connection
            request = pb.WatchEventsRequest(after_sequence=self.cursor, replay_history=True)
            call = client.WatchEvents(request, timeout=None)
            first_after_resume = True
            try:
                async for response in call:
                    if response.HasField("heartbeat"):
                        hw = response.heartbeat.high_water_sequence
                        if hw < self.cursor:
                            self.violations.append(f"heartbeat {hw} below cursor {self.cursor}")
                        self.cursor = max(self.cursor, hw)  # bookmark: nothing <= hw may follow
                    else:
                        seq = response.event.sequence
                        if seq <= self.cursor:
                            self.violations.append(f"event {seq} at/below cursor {self.cursor}")
                        if first_after_resume and self.received and seq <= self.received[-1][0]:
                            self.violations.append(f"resume repeated {seq}")
                        first_after_resume = False
                        self.received.append((seq, response.event.id))
                        self.cursor = seq
                    budget -= 1
                    if budget <= 0 or (stop.is_set() and final and self.cursor >= final[0]):
                        break
            except grpc.aio.AioRpcError as exc:
                self.violations.append(f"stream failed: {exc.code()}")
            finally:
                call.cancel()
                self.reconnects += 1


async def full_history(url: str) -> list[tuple[int, str]]:
    db = Database(url)
    try:
        async with db.read() as conn:
            rows = await SqlEventReads(conn).read_after(0, limit=1_000_000)
    finally:
        await db.dispose()
    return [(e.sequence, e.id) for e in rows]


async def test_subscribers_resume_without_gaps_under_concurrent_writers(
    db_url: str, tmp_path: Path
) -> None:
    server = await start_server(db_url, tmp_path, watch_heartbeat_seconds=0.05)
    rng = random.Random(SEED)
    subscribers = [Subscriber(f"s{i}", random.Random(rng.random())) for i in range(SUBSCRIBERS)]
    stop = asyncio.Event()
    final: list[int] = []

    async def writer(w: int) -> None:
        client = server.stub("alice")
        for i in range(SENDS_PER_WRITER):
            await client.SendNotification(send_request(idempotency_key=f"w{w}-{i}"))

    try:
        watching = [asyncio.create_task(s.run(server, stop, final)) for s in subscribers]
        await asyncio.gather(*(writer(w) for w in range(WRITERS)))
        # Let dispatch finish every delivery, then fix the final high-water mark.
        history: list[tuple[int, str]] = []
        for _ in range(600):
            history = await full_history(db_url)
            if len(history) >= WRITERS * SENDS_PER_WRITER * 5:
                break
            await asyncio.sleep(0.05)
        final.append(history[-1][0])
        stop.set()
        await asyncio.wait_for(asyncio.gather(*watching), timeout=120)
    finally:
        await server.stop()

    assert len(history) >= WRITERS * SENDS_PER_WRITER * 5
    sequences = [s for s, _ in history]
    assert sequences == sorted(sequences)
    for s in subscribers:
        assert s.violations == [], (s.name, s.violations[:5])
        got = [seq for seq, _ in s.received]
        assert got == sorted(set(got)), f"{s.name}: not strictly increasing"
        assert s.received == history, (
            f"{s.name}: {len(s.received)} events vs {len(history)} in history"
        )
        assert s.reconnects > 3  # it really did drop and resume along the way
