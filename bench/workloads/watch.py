"""watch: commit -> arrival latency at N concurrent WatchEvents subscribers.

Every subscriber filters on the bench type and ACCEPTED events. A primer notification
proves every stream is registered before measuring (and the server's RSS is read
then). Then one producer sends ``watch_events`` notifications at a rate that keeps the
load generator itself far from saturation (it reads N copies of each event), and we
measure, per delivered copy, wall-clock arrival minus the event's ``at``. ``at`` is
taken inside the committing transaction just before its inserts, so the figure is an
upper bound on commit -> arrival that includes the transaction's own few milliseconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time

import grpc

from bench import client
from bench.config import Profile
from bench.cpu import CpuMeter, rss_mb
from bench.harness import TYPE_WATCH
from bench.stats import Row
from bench.workloads.common import sender
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2

StreamCall = grpc.aio.UnaryStreamCall[pb.WatchEventsRequest, bytes]
WATCH_METHOD = "/{}/WatchEvents".format(
    pb.DESCRIPTOR.services_by_name["NotificationService"].full_name
)
# How a serialized WatchEventsResponse holding an event starts: field 1 (``event``),
# length-delimited. A heartbeat (field 2) starts with 0x12.
EVENT_TAG = b"\x0a"
STREAMS_PER_CONNECTION = 100
MAX_COPIES_PER_SECOND = 4000.0
MAX_EVENTS_PER_SECOND = 20.0
PRIMER_TIMEOUT_SECONDS = 60.0
TAIL_TIMEOUT_SECONDS = 20.0


class Subscribers:
    """Every stream, in this process, with the copies kept undecoded until the window
    closes: at the largest level this process reads each event 1,000 times over, on the
    same two cores as the server, and decoding on arrival (~18 % of its CPU per copy)
    would delay the next stream's read and count as server latency."""

    def __init__(self, target: str, subscribers: int) -> None:
        self.errors = 0
        self.changed = asyncio.Event()
        self._arrivals: list[tuple[float, bytes]] = []  # (wall clock, raw response)
        self._unmeasured = 0
        self._measuring = False
        self._connections = [
            client.channel(target, own_connection=True)
            for _ in range(math.ceil(subscribers / STREAMS_PER_CONNECTION))
        ]
        self._subscribers = subscribers
        self._calls: list[StreamCall] = []
        self._tasks: list[asyncio.Task[None]] = []

    async def open(self) -> None:
        request = pb.WatchEventsRequest(
            notification_type=TYPE_WATCH, kinds=[types_pb2.EVENT_KIND_ACCEPTED]
        )
        for i in range(self._subscribers):
            watch: grpc.aio.UnaryStreamMultiCallable[pb.WatchEventsRequest, bytes] = (
                self._connections[i // STREAMS_PER_CONNECTION].unary_stream(
                    WATCH_METHOD,
                    request_serializer=pb.WatchEventsRequest.SerializeToString,
                    response_deserializer=None,  # raw bytes: decoded after the window
                )
            )
            call = watch(request, metadata=client.METADATA)
            self._calls.append(call)
            self._tasks.append(asyncio.create_task(self._follow(call)))

    async def _follow(self, call: StreamCall) -> None:
        try:
            async for reply in call:
                if reply[:1] != EVENT_TAG:
                    continue  # a heartbeat
                if self._measuring:
                    self._arrivals.append((time.time(), reply))
                else:
                    self._unmeasured += 1
                self.changed.set()
        except asyncio.CancelledError:
            raise
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                self.errors += 1

    def prime(self) -> None:
        self._unmeasured = 0

    def measure(self) -> None:
        self._measuring = True

    def received(self) -> int:
        return len(self._arrivals) if self._measuring else self._unmeasured

    async def wait(self, expected: int, limit_seconds: float) -> bool:
        """Until ``expected`` copies arrived since ``prime``/``measure``, or the limit."""
        deadline = time.monotonic() + limit_seconds
        while self.received() < expected:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), min(remaining, 0.5))
        return True

    async def close(self) -> list[float]:
        """Ends every stream; the latencies of the copies seen while measuring."""
        for call in self._calls:
            call.cancel()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for chan in self._connections:
            await chan.close()
        latencies = []
        for arrived, raw in self._arrivals:
            at = pb.WatchEventsResponse.FromString(raw).event.at
            latencies.append((arrived - (at.seconds + at.nanos / 1e9)) * 1000)
        return latencies


async def _level(
    target: str, subscribers: int, profile: Profile, meter: CpuMeter, server_pid: int, tag: str
) -> Row:
    subs = Subscribers(target, subscribers)
    producer_channel = client.channel(target)
    rss_before = rss_mb(server_pid)
    rss_at: float | None = None
    try:
        await subs.open()
        send = sender(client.stub(producer_channel), TYPE_WATCH, f"{tag}-w{subscribers}")
        # Primer: repeat until one reaches every subscriber (streams register lazily).
        primed = False
        deadline = time.monotonic() + PRIMER_TIMEOUT_SECONDS
        while not primed and time.monotonic() < deadline:
            subs.prime()
            await send(0)
            primed = await subs.wait(subscribers, 3.0)
        rss_at = rss_mb(server_pid)
        rate = min(MAX_EVENTS_PER_SECOND, MAX_COPIES_PER_SECOND / subscribers)
        subs.measure()
        meter.start()
        await client.paced_loop(send, rate=rate, count=profile.watch_events)
        complete = await subs.wait(subscribers * profile.watch_events, TAIL_TIMEOUT_SECONDS)
        window = meter.stop()
    finally:
        latencies = await subs.close()
        await producer_channel.close()
    delivered = len(latencies)
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
        latencies_ms=latencies,
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
