"""watch: commit -> arrival latency at N concurrent WatchEvents subscribers.

Every subscriber filters on the bench type and ACCEPTED events. A primer notification
proves every stream is registered before measuring (and the server's RSS is read
then). Then one producer sends ``watch_events`` notifications at a rate that keeps the
load generator itself far from saturation (it decodes N copies of each event), and we
measure, per delivered copy, wall-clock arrival minus the event's ``at``. ``at`` is
taken inside the committing transaction just before its inserts, so the figure is an
upper bound on commit -> arrival that includes the transaction's own few milliseconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import Counter

import grpc

from bench import client
from bench.config import Profile
from bench.cpu import CpuMeter, rss_mb
from bench.harness import TYPE_WATCH
from bench.stats import Row
from bench.workloads.common import sender
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2

StreamCall = grpc.aio.UnaryStreamCall[pb.WatchEventsRequest, pb.WatchEventsResponse]
STREAMS_PER_CONNECTION = 100
MAX_COPIES_PER_SECOND = 4000.0
MAX_EVENTS_PER_SECOND = 20.0
PRIMER_TIMEOUT_SECONDS = 60.0
TAIL_TIMEOUT_SECONDS = 20.0


class _Subscribers:
    def __init__(self) -> None:
        self.latencies_ms: list[float] = []
        self.copies: Counter[str] = Counter()  # notification id -> subscribers reached
        self.measuring = False
        self.errors = 0
        self.changed = asyncio.Event()

    async def follow(self, call: StreamCall) -> None:
        try:
            async for reply in call:
                if not reply.HasField("event"):
                    continue
                arrived = time.time()
                event = reply.event
                if self.measuring:
                    at = event.at.seconds + event.at.nanos / 1e9
                    self.latencies_ms.append((arrived - at) * 1000)
                self.copies[event.notification_id] += 1
                self.changed.set()
        except asyncio.CancelledError:
            raise
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                self.errors += 1

    async def wait(self, expected: int, limit_seconds: float) -> bool:
        deadline = time.monotonic() + limit_seconds
        while sum(self.copies.values()) < expected:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), min(remaining, 0.5))
        return True


async def _level(
    target: str, subscribers: int, profile: Profile, meter: CpuMeter, server_pid: int, tag: str
) -> Row:
    subs = _Subscribers()
    request = pb.WatchEventsRequest(
        notification_type=TYPE_WATCH, kinds=[types_pb2.EVENT_KIND_ACCEPTED]
    )
    connections = [
        client.channel(target, own_connection=True)
        for _ in range(math.ceil(subscribers / STREAMS_PER_CONNECTION))
    ]
    producer_channel = client.channel(target)
    calls: list[StreamCall] = []
    tasks: list[asyncio.Task[None]] = []
    rss_before = rss_mb(server_pid)
    rss_at: float | None = None
    try:
        for i in range(subscribers):
            stub = client.stub(connections[i // STREAMS_PER_CONNECTION])
            call = stub.WatchEvents(request, metadata=client.METADATA)
            calls.append(call)
            tasks.append(asyncio.create_task(subs.follow(call)))
        send = sender(client.stub(producer_channel), TYPE_WATCH, f"{tag}-w{subscribers}")
        # Primer: repeat until one reaches every subscriber (streams register lazily).
        primed = False
        deadline = time.monotonic() + PRIMER_TIMEOUT_SECONDS
        while not primed and time.monotonic() < deadline:
            subs.copies.clear()
            await send(0)
            primed = await subs.wait(subscribers, 3.0)
        rss_at = rss_mb(server_pid)
        subs.copies.clear()
        rate = min(MAX_EVENTS_PER_SECOND, MAX_COPIES_PER_SECOND / subscribers)
        subs.measuring = True
        meter.start()
        await client.paced_loop(send, rate=rate, count=profile.watch_events)
        complete = await subs.wait(subscribers * profile.watch_events, TAIL_TIMEOUT_SECONDS)
        window = meter.stop()
        subs.measuring = False
    finally:
        for call in calls:
            call.cancel()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for chan in [*connections, producer_channel]:
            await chan.close()
    delivered = sum(subs.copies.values())
    expected = subscribers * profile.watch_events
    notes = []
    if not primed:
        notes.append("not every stream registered")
    if not complete:
        notes.append(f"{expected - delivered} of {expected} copies missing")
    if subs.errors:
        notes.append(f"{subs.errors} stream errors")
    if rss_at is not None and rss_before is not None:
        notes.insert(0, f"server RSS {rss_at:.0f} MB ({rss_at - rss_before:+.0f})")
    return Row(
        group="uns",
        name="watch",
        setting=f"subs={subscribers}",
        ops=delivered,
        seconds=profile.watch_events / rate,
        latencies_ms=subs.latencies_ms,
        server_cpu_s=window.server,
        db_cpu_s=window.db,
        client_cpu_s=window.client,
        note="; ".join(notes),
        extra={
            "events": profile.watch_events,
            "event_rate": rate,
            "server_rss_mb_before": rss_before,
            "server_rss_mb": rss_at,
        },
    )


async def run(
    target: str, profile: Profile, meter: CpuMeter, server_pid: int, tag: str
) -> list[Row]:
    return [
        await _level(target, n, profile, meter, server_pid, tag) for n in profile.watch_subscribers
    ]
