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

import pytest

from tests.reliability.tcp_proxy import TcpProxy
from tests.reliability.test_failover import LISTEN_FOLLOWS_WITHIN_SECONDS, new_database
from tests.support.postgres import PostgresProcess
from tests.support.standby import ReplicatedPostgres
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
