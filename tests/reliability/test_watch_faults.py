"""A WatchEvents subscriber that is cut off again and again — its own channel closed at
random points, the server it reads from stopped gracefully or killed — still receives
every event exactly once and in order, by resuming with ``after_sequence``."""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from tests.reliability import report as reliability_report
from tests.reliability.checker import EventView, History
from tests.reliability.harness import (
    OPERATOR,
    Producers,
    ServerFactory,
    metadata,
    replay_events,
    run_checker,
    scaled,
    wait_settled,
)
from tests.support.process import ServerProcess
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import notification_service_pb2_grpc as pb_grpc


@dataclass
class Subscriber:
    """Reads one notification type's events, resuming after the last sequence it saw."""

    notification_type: str
    targets: list[str]
    rng: random.Random
    received: list[EventView] = field(default_factory=list)
    cursor: int = 0
    connections: int = 0
    current: str = ""  # the server the open stream reads from
    cuts: Counter[str] = field(default_factory=Counter)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            # Mostly the server that is about to be restarted (the newest one).
            target = self.targets[-1] if self.rng.random() < 0.7 else self.rng.choice(self.targets)
            budget = self.rng.randint(1, 60)  # cut our own stream after this many events
            # ...or after this long: once the producers are done, no event would ever cut
            # a stream on the server that stays up, and the test waits for the other one.
            lifetime = self.rng.uniform(0.2, 3.0)
            self.connections += 1
            self.current = target
            try:
                async with (
                    grpc.aio.insecure_channel(target) as channel,
                    _cut_after(lifetime, self.cuts),
                ):
                    call = pb_grpc.NotificationServiceStub(channel).WatchEvents(
                        pb.WatchEventsRequest(
                            notification_type=self.notification_type,
                            after_sequence=self.cursor,
                            replay_history=self.cursor == 0,
                        ),
                        metadata=metadata(OPERATOR),
                    )
                    async for response in call:
                        if response.HasField("heartbeat"):
                            # A quiet stream still moves the cursor forward.
                            self.cursor = max(self.cursor, response.heartbeat.high_water_sequence)
                        else:
                            event = EventView.from_proto(response.event)
                            self.received.append(event)
                            self.cursor = max(self.cursor, event.sequence)
                            budget -= 1
                        if stop.is_set() or budget <= 0:
                            self.cuts["client"] += 1
                            call.cancel()
                            break
                    else:
                        self.cuts["server ended"] += 1
            except grpc.aio.AioRpcError as err:
                self.cuts[err.code().name] += 1
                await asyncio.sleep(0.1)
            finally:
                self.current = ""


@contextlib.asynccontextmanager
async def _cut_after(seconds: float, cuts: Counter[str]) -> AsyncIterator[None]:
    try:
        async with asyncio.timeout(seconds):
            yield
    except TimeoutError:
        cuts["client timer"] += 1


async def test_watch_resumes_exactly_once_in_order(tmp_path: Path, database_url: str) -> None:
    ntype = "rel.watch"
    # Producers write through the second server, which stays up; the first is restarted
    # four times under the subscriber. Both commit events concurrently.
    servers = ServerFactory(tmp_path, database_url, lease_seconds=3)
    history = History()
    producers = Producers(history, ntype, "watch", "")
    stop = asyncio.Event()
    subscriber_task: asyncio.Task[None] | None = None
    try:
        second = await servers.start()
        first = await servers.start()
        targets = [second.target, first.target]
        subscriber = Subscriber(ntype, targets, random.Random(8))
        producers.target = second.target
        subscriber_task = asyncio.create_task(subscriber.run(stop))
        target = scaled(250)
        signals = [signal.SIGTERM, signal.SIGKILL] * 2 * max(1, target // 500)
        step = target * 4 // 5 // len(signals)
        async with producers.steady(concurrency=2, pause=0.02, limit=target):
            restartable = first
            for round_, sig in enumerate(signals, start=1):
                await producers.wait_acknowledged(step * round_, within=60)
                # Cut the subscriber off from the server side: stop the server it reads.
                deadline = time.monotonic() + 10
                while subscriber.current != restartable.target:
                    assert time.monotonic() < deadline, "subscriber never on the server"
                    await asyncio.sleep(0.01)
                # SIGTERM: streams end UNAVAILABLE with their resume cursor.
                # SIGKILL: streams just break.
                restartable = await restart(servers, restartable, targets, sig)
            await producers.wait_acknowledged(target, within=60)
        await wait_settled(lambda: second.target, ntype, history)
        expected = await replay_events(second.target, ntype)
        deadline = time.monotonic() + 30
        while subscriber.cursor < expected[-1].sequence:
            assert time.monotonic() < deadline, "the subscriber never caught up"
            await asyncio.sleep(0.1)
        stop.set()
        await asyncio.wait_for(subscriber_task, 15)
        reliability_report.note(
            "watch",
            server_restarts=len(signals),
            events_received=len(subscriber.received),
            connections=subscriber.connections,
            cuts=dict(subscriber.cuts),
        )
        report = await run_checker(second.target, ntype, history, [], label="watch")
    finally:
        stop.set()
        if subscriber_task is not None and not subscriber_task.done():
            subscriber_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await subscriber_task
        await producers.close()
        servers.stop_all()

    got = [e.sequence for e in subscriber.received]
    print(
        f"[watch] {len(got)} events over {subscriber.connections} connections, "
        f"cuts {dict(subscriber.cuts)}"
    )
    assert len(got) == len(set(got)), "an event was delivered twice"
    assert got == sorted(got), "events out of order"
    # Exactly the committed history, nothing missing (compare ids, not just sequences).
    assert [e.id for e in subscriber.received] == [e.id for e in expected]
    # Restarts under the open stream; one may race the subscriber's own cut.
    server_cuts = sum(n for cause, n in subscriber.cuts.items() if cause != "client")
    assert subscriber.cuts["client"] >= 10 and server_cuts >= len(signals) - 1
    report.assert_ok()


async def restart(
    servers: ServerFactory, server: ServerProcess, targets: list[str], sig: int
) -> ServerProcess:
    targets.remove(server.target)
    server.stop(sig)
    replacement = await servers.start()
    targets.append(replacement.target)
    return replacement
