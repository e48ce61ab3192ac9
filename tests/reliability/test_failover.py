"""PostgreSQL fails over under load: the primary (with a synchronous streaming standby)
goes away and the standby is promoted, while producers keep sending to a UNS server
on the pair's multi-host URL (``target_session_attrs=read-write``). The same server
process reconnects by itself, and nothing a producer was answered OK for is lost.

The primary goes away in two ways: *killed* (its connections close, as when the
process dies or the host reboots) and *vanished* (nothing closes: a crashed machine
or a partition; a TCP proxy in front of it goes silent). In the second case the dead
host is listed first, so every new connection would try it first.
Also: the connections the old primary closed are never handed out again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from tests.conftest import PostgresDatabases
from tests.reliability import report as reliability_report
from tests.reliability.checker import History
from tests.reliability.harness import (
    Producers,
    Provider,
    ServerFactory,
    run_checker,
    wait_settled,
    webhook_policy,
    write_channels,
)
from tests.reliability.tcp_proxy import TcpProxy
from tests.support.http_receiver import Reply
from tests.support.postgres import PostgresProcess
from tests.support.standby import ReplicatedPostgres
from uns_server.store import db as db_module
from uns_server.store.db import TOPIC_WORK, Database
from uns_server.store.listen import listen_forever

SENDS = 300
# The servers' bound on a statement or connection attempt: how long a vanished host
# can hold a request.
COMMAND_TIMEOUT_SECONDS = 2.0


# LISTEN connections in the failover test: the server's and another process's.
LISTENERS = 2
# How long a LISTEN connection may take to follow the primary: a keepalive round (to
# notice a vanished host), then backoffs up to store.listen's 10 s, and the attempts.
LISTEN_FOLLOWS_WITHIN_SECONDS = 90.0


async def wait_listening(cluster: ReplicatedPostgres, database: str, count: int) -> None:
    """Until ``count`` UNS LISTEN connections are on the standby (the promoted primary)."""
    async with asyncio.timeout(LISTEN_FOLLOWS_WITHIN_SECONDS):
        while True:
            if await asyncio.to_thread(cluster.listeners, cluster.standby, database) >= count:
                return
            await asyncio.sleep(0.2)


@pytest.fixture
def cluster() -> Iterator[ReplicatedPostgres]:
    pair = ReplicatedPostgres()
    try:
        yield pair
    finally:
        pair.destroy()


async def new_database(cluster: ReplicatedPostgres) -> str:
    """A fresh migrated database on the primary, visible on the standby too."""
    url = await PostgresDatabases(cluster.primary.url()).new()
    await asyncio.to_thread(cluster.wait_replayed)
    return url.rsplit("/", 1)[1]


@pytest.mark.parametrize("how", ["killed", "vanished"])
async def test_failover_under_load_loses_nothing_acknowledged(
    tmp_path: Path, cluster: ReplicatedPostgres, how: str
) -> None:
    name = await new_database(cluster)
    proxy = TcpProxy("127.0.0.1", cluster.primary.port)
    await proxy.start()
    if how == "vanished":
        url = cluster.url(name, primary_port=proxy.port, primary_first=True)
    else:
        url = cluster.url(name)
    ntype = f"rel.failover.{how}"
    await webhook_policy(url, ntype)

    # Another process's LISTEN connection on the same URL: it must follow the primary.
    other = Database(url, command_timeout=COMMAND_TIMEOUT_SECONDS)
    woken = asyncio.Event()
    other.on_commit(TOPIC_WORK, woken.set)
    listening = asyncio.create_task(listen_forever(other, (TOPIC_WORK,)))

    async with Provider(lambda _r: Reply(delay_seconds=0.05)) as provider:
        servers = ServerFactory(
            tmp_path,
            url,
            lease_seconds=3,
            extra=("--db-command-timeout-seconds", str(COMMAND_TIMEOUT_SECONDS)),
        )
        producers = Producers(History(), ntype, f"failover-{how}", "", call_timeout=10)
        try:
            server = await servers.start(channels_file=write_channels(tmp_path, provider.url()))
            producers.target = server.target
            async with producers.steady(concurrency=3, pause=0.02, limit=SENDS):
                await producers.wait_acknowledged(SENDS // 4, within=60)
                killed = time.monotonic()
                woken.clear()
                if how == "vanished":
                    proxy.blackhole()
                await asyncio.to_thread(cluster.fail_over)
                promoted = time.monotonic()
                before = len(producers.history.acknowledged)
                await producers.wait_acknowledged(before + 1, within=60)
                writing_again = time.monotonic()
                await producers.wait_acknowledged(before + SENDS // 4, within=60)
            # Both LISTEN connections (the server's, the other process's) have followed
            # the primary: its backoff tops out at 10 s. (A send is no way to see this:
            # the server hands what it accepts to its own dispatcher and wakes no one.)
            await wait_listening(cluster, name, LISTENERS)
            # and the other one caught up on what it missed meanwhile: one wake-up
            await asyncio.wait_for(woken.wait(), 10)

            await wait_settled(lambda: server.target, ntype, producers.history, within=60)
            report = await run_checker(
                server.target,
                ntype,
                producers.history,
                provider.receipts,
                label=f"failover-{how}",
            )
            assert server.proc.poll() is None, "the server did not survive the failover"
            # Replication is synchronous: no warning at start (store/durability.py).
            assert "failover may lose data" not in server.output()
        finally:
            await producers.close()
            servers.stop_all()
            listening.cancel()
            await asyncio.gather(listening, return_exceptions=True)
            await other.dispose()
            await proxy.stop()
    db = Database(cluster.url(name))
    try:
        async with db.read() as conn:
            in_recovery = (await conn.execute(text("SELECT pg_is_in_recovery()"))).scalar()
    finally:
        await db.dispose()
    assert in_recovery is False  # the standby was promoted, and is the one written to
    outage = writing_again - killed
    print(
        f"\n[failover-{how}] promote took {promoted - killed:.1f}s, first acknowledged send "
        f"{outage:.1f}s after the primary went; codes {dict(producers.history.codes)}"
    )
    reliability_report.note(
        f"failover-{how}", promote_seconds=promoted - killed, writing_again_seconds=outage
    )
    report.assert_ok()
    assert not report.lost and not report.unexpected
    assert report.acknowledged >= SENDS // 2
    codes = {code for _at, code in producers.errors}
    assert codes <= {"UNAVAILABLE"}, f"sends failed with {codes} (expected only UNAVAILABLE)"


async def test_connections_the_server_closed_are_never_handed_out(
    pg: PostgresProcess, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every pooled connection ends at once when the primary goes (here: a restart).
    The pool knows which ones the server closed without a round trip, so the next
    transactions get fresh connections, even those that were idle too briefly to be
    pinged."""
    monkeypatch.setattr(db_module, "PG_PING_AFTER_IDLE_SECONDS", 3600.0)  # never ping
    db = Database(database_url)
    try:

        async def one_transaction() -> int:
            async with db.write() as tx:
                return int((await tx.conn.execute(text("SELECT 1"))).scalar_one())

        async def holding(entered: asyncio.Barrier) -> None:
            async with db.write() as tx:
                await tx.conn.execute(text("SELECT 1"))
                await entered.wait()  # all four are checked out at once

        entered = asyncio.Barrier(4)
        await asyncio.gather(*(holding(entered) for _ in range(4)))  # four pooled
        await asyncio.to_thread(pg.stop, "fast")
        await asyncio.to_thread(pg.start)
        assert await asyncio.gather(*(one_transaction() for _ in range(4))) == [1] * 4
    finally:
        await db.dispose()


async def test_a_server_whose_host_is_a_standby_answers_unavailable(
    tmp_path: Path, cluster: ReplicatedPostgres
) -> None:
    """A URL whose one host is a standby now (a DNS name the failover has not moved yet,
    or a URL without ``target_session_attrs``): PostgreSQL refuses every write as a
    read-only transaction. Producers get UNAVAILABLE (retry: the outcome is known not
    to have happened), never INTERNAL, and the connection is dropped so that the next
    one may reach the primary."""
    name = await new_database(cluster)
    servers = ServerFactory(tmp_path, cluster.standby.url(name))
    # Producers retry UNAVAILABLE with the same key (docs/producers.md); a short budget
    # keeps this test quick: every answer is UNAVAILABLE, and none is ever OK.
    history = History()
    producers = Producers(history, "rel.standby", "standby", "", retry_unknown_seconds=1.0)
    try:
        server = await servers.start()
        producers.target = server.target
        await producers.send(3, concurrency=1)
    finally:
        await producers.close()
        servers.stop_all()
    codes = {code for _at, code in producers.errors}
    assert codes == {"UNAVAILABLE"} and len(producers.errors) >= 3
    assert history.acknowledged == {}
