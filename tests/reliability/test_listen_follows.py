"""Every process's LISTEN connection follows the writable host, however often it goes
(issue 35, item 1): the primary is killed and restarted, blackholed and healed, and at
last blackholed for good while its standby is promoted. After each outage both
listeners (two processes' ``store.listen`` loops on the same multi-host URL) are back on
the writable host, caught up once on what they missed, and woken again by commits.

The state is polled (``pg_stat_activity`` names the LISTEN connections), never timed:
``wait_listening`` only bounds how long the backoff may take."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.reliability.checker import EventView, History
from tests.reliability.harness import OPERATOR, Producers, ServerFactory, metadata
from tests.reliability.tcp_proxy import TcpProxy
from tests.reliability.test_failover import LISTEN_FOLLOWS_WITHIN_SECONDS, new_database
from tests.support.postgres import PostgresProcess
from tests.support.standby import ReplicatedPostgres
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import notification_service_pb2_grpc as pb_grpc
from uns_server.store.db import TOPIC_EVENTS, TOPIC_WORK, Database
from uns_server.store.listen import listen_forever

TOPICS = (TOPIC_WORK, TOPIC_EVENTS)
COMMAND_TIMEOUT_SECONDS = 2.0


@pytest.fixture
def pair() -> Iterator[ReplicatedPostgres]:
    cluster = ReplicatedPostgres()
    try:
        yield cluster
    finally:
        cluster.destroy()


class Listener:
    """One process's LISTEN loop, counting the wake-ups of each topic."""

    def __init__(self, url: str) -> None:
        self.db = Database(url, command_timeout=COMMAND_TIMEOUT_SECONDS)
        self.fired: Counter[str] = Counter()
        for topic in TOPICS:
            self.db.on_commit(topic, lambda topic=topic: self.fired.update([topic]))
        self.task = asyncio.create_task(listen_forever(self.db, TOPICS))

    async def close(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        await self.db.dispose()


async def until(predicate: Callable[[], Awaitable[bool]], what: str) -> None:
    try:
        async with asyncio.timeout(LISTEN_FOLLOWS_WITHIN_SECONDS):
            while True:
                if await predicate():
                    return
                await asyncio.sleep(0.2)
    except TimeoutError:
        raise AssertionError(f"never: {what}") from None


async def test_every_listen_connection_follows_the_writable_host(
    pair: ReplicatedPostgres,
) -> None:
    name = await new_database(pair)
    proxy = TcpProxy("127.0.0.1", pair.primary.port)
    await proxy.start()
    # The primary (behind the proxy) first: every attempt tries the vanished one first.
    url = pair.url(name, primary_port=proxy.port, primary_first=True)
    listeners = [Listener(url), Listener(url)]
    writer = Database(url, command_timeout=COMMAND_TIMEOUT_SECONDS)

    async def on(server: PostgresProcess) -> None:
        async def all_there() -> bool:
            count = await asyncio.to_thread(pair.listeners, server, name)
            return count == len(listeners)

        await until(all_there, f"{len(listeners)} LISTEN connections on port {server.port}")

    async def woken_since(before: list[Counter[str]], what: str) -> None:
        async def all_woken() -> bool:
            return all(
                listener.fired[topic] > seen[topic]
                for listener, seen in zip(listeners, before, strict=True)
                for topic in TOPICS
            )

        await until(all_woken, what)

    async def commit_signals() -> None:
        async def committed() -> bool:
            try:
                async with writer.write() as tx:
                    for topic in TOPICS:
                        tx.signal(topic)
            except Exception:  # the writer's pool may still hold a dead connection
                return False
            return True

        await until(committed, "a commit on the writable host")

    def counts() -> list[Counter[str]]:
        return [Counter(listener.fired) for listener in listeners]

    async def check_resumed(
        server: PostgresProcess, outage: str, before: list[Counter[str]]
    ) -> None:
        await on(server)
        # Nothing was committed since the outage began: only the catch-up wakes them.
        await woken_since(before, f"a catch-up after {outage}")
        before = counts()
        await commit_signals()  # and commits wake them again, from the writable host
        await woken_since(before, f"a NOTIFY after {outage}")

    try:
        await check_resumed(pair.primary, "the start", counts())
        for outage in ("killed", "vanished", "killed", "vanished"):
            before = counts()
            if outage == "killed":
                await asyncio.to_thread(pair.primary.stop, "immediate")
                await asyncio.to_thread(pair.primary.start)
            else:
                proxy.blackhole()
                await asyncio.sleep(0.5)  # let the listeners' round trips go unanswered
                proxy.heal()
            await check_resumed(pair.primary, outage, before)
        # For good now: nothing answers on the primary's address, the standby is promoted.
        before = counts()
        proxy.blackhole()
        await asyncio.to_thread(pair.fail_over)
        await check_resumed(pair.standby, "the failover", before)
    finally:
        for listener in listeners:
            await listener.close()
        await writer.dispose()
        await proxy.stop()


# The watching server's hub wakes only by LISTEN: its safety-net poll is turned off, and
# it dispatches nothing (its own commits would wake it in-process).
NOTIFY_ONLY = "import uns_server.services.watch.hub as hub; hub.HUB_FALLBACK_POLL_SECONDS = 3600.0"


async def test_a_watch_stream_through_the_server_resumes_after_the_primary_goes(
    tmp_path: Path, pair: ReplicatedPostgres
) -> None:
    """WatchEvents through a server whose LISTEN followed the writable host: the
    primary killed (and restarted), then blackholed for good while the standby is
    promoted. After each outage, with both servers' LISTEN on the writable host, a
    stream resumed from its cursor gets what was committed since it closed (catch-up,
    before its first heartbeat) and then, live, what another server commits (a push,
    which only a NOTIFY to this server's LISTEN can bring)."""
    name = await new_database(pair)
    proxy = TcpProxy("127.0.0.1", pair.primary.port)
    await proxy.start()
    url = pair.url(name, primary_port=proxy.port, primary_first=True)
    ntype = "rel.listen.watch"
    timeout = ("--db-command-timeout-seconds", str(COMMAND_TIMEOUT_SECONDS))
    writers = ServerFactory(tmp_path, url, extra=timeout)
    watchers = ServerFactory(
        tmp_path, url, extra=(*timeout, "--no-dispatch-enabled"), preamble=NOTIFY_ONLY
    )
    producers = Producers(History(), ntype, "listen-watch", "", call_timeout=10)
    stream: WatchStream | None = None
    try:
        writer = await writers.start()
        watcher = await watchers.start()
        producers.target = writer.target
        stream = WatchStream(watcher.target, ntype)

        async def check_resumes(server: PostgresProcess, outage: str) -> None:
            await until(
                lambda: listening(pair, server, name, 2), f"both servers LISTEN after {outage}"
            )
            missed = {await sent(producers) for _ in range(3)}
            caught_up = await stream.open()  # from the cursor the last stream ended at
            assert missed <= {e.notification_id for e in caught_up}, f"catch-up after {outage}"
            pushed = await sent(producers)
            await stream.wait_for(pushed, f"a push after {outage}")
            await stream.close()

        await check_resumes(pair.primary, "the start")
        await asyncio.to_thread(pair.primary.stop, "immediate")
        await asyncio.to_thread(pair.primary.start)
        await check_resumes(pair.primary, "the primary was killed")
        proxy.blackhole()
        await asyncio.to_thread(pair.fail_over)
        await check_resumes(pair.standby, "the failover")
        sequences = [e.sequence for e in stream.received]
        assert sequences == sorted(set(sequences)), "every event once, in order"
    finally:
        if stream is not None:
            await stream.channel.close()
        await producers.close()
        writers.stop_all()
        watchers.stop_all()
        await proxy.stop()


async def listening(pair: ReplicatedPostgres, server: PostgresProcess, name: str, n: int) -> bool:
    return await asyncio.to_thread(pair.listeners, server, name) == n


async def sent(producers: Producers) -> str:
    """One notification sent (retried while the writer's pool still holds dead
    connections); its id."""
    nid = await producers.send_until_known()
    assert nid is not None, f"a send failed: {dict(producers.history.codes)}"
    return nid


class WatchStream:
    """One WatchEvents stream at a time, each resumed after the last sequence seen."""

    def __init__(self, target: str, notification_type: str) -> None:
        self.channel = grpc.aio.insecure_channel(target)
        self.notification_type = notification_type
        self.cursor = 0
        self.received: list[EventView] = []
        self.call: Any = None

    async def open(self) -> list[EventView]:
        """Resume from the cursor; what came before the first heartbeat (the catch-up)."""
        self.call = pb_grpc.NotificationServiceStub(self.channel).WatchEvents(
            pb.WatchEventsRequest(
                notification_type=self.notification_type,
                after_sequence=self.cursor,
                replay_history=self.cursor == 0,
            ),
            metadata=metadata(OPERATOR),
        )
        caught_up: list[EventView] = []
        async with asyncio.timeout(LISTEN_FOLLOWS_WITHIN_SECONDS):
            while True:
                event = await self._next()
                if event is None:
                    return caught_up
                caught_up.append(event)

    async def wait_for(self, notification_id: str, what: str) -> None:
        try:
            async with asyncio.timeout(LISTEN_FOLLOWS_WITHIN_SECONDS):
                while True:
                    event = await self._next()
                    if event is not None and event.notification_id == notification_id:
                        return
        except TimeoutError:
            raise AssertionError(f"never: {what}") from None

    async def _next(self) -> EventView | None:
        """The next event, or None for a heartbeat."""
        response = await self.call.read()
        assert response is not grpc.aio.EOF, "the stream ended"
        if response.HasField("heartbeat"):
            return None
        event = EventView.from_proto(response.event)
        self.received.append(event)
        self.cursor = max(self.cursor, event.sequence)
        return event

    async def close(self) -> None:
        self.call.cancel()
