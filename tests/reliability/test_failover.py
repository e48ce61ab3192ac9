"""PostgreSQL fails over under load: the primary (with a synchronous streaming standby)
is killed and the standby promoted, while producers keep sending to a UNS server on
the pair's multi-host URL (``target_session_attrs=read-write``). The same server
process reconnects by itself, and nothing a producer was answered OK for is lost.
Also: the connections the old primary closed are never handed out again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
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
from tests.support.http_receiver import Reply
from tests.support.postgres import PostgresProcess
from tests.support.standby import ReplicatedPostgres
from uns_server.store import db as db_module
from uns_server.store.db import TOPIC_WORK, Database
from uns_server.store.listen import listen_forever

SENDS = 300


@pytest.fixture(scope="module")
def cluster() -> Iterator[ReplicatedPostgres]:
    pair = ReplicatedPostgres()
    try:
        yield pair
    finally:
        pair.destroy()


@pytest.fixture
async def pair_url(cluster: ReplicatedPostgres) -> str:
    """A fresh migrated database on the primary, reached through both hosts."""
    url = await PostgresDatabases(cluster.primary.url()).new()
    await asyncio.to_thread(cluster.wait_replayed)
    return cluster.url(url.rsplit("/", 1)[1])


@pytest.fixture
async def listener(pair_url: str) -> AsyncIterator[asyncio.Event]:
    """A LISTEN connection of another process on the same URL: set on every wake-up."""
    db = Database(pair_url)
    woken = asyncio.Event()
    db.on_commit(TOPIC_WORK, woken.set)
    task = asyncio.create_task(listen_forever(db, (TOPIC_WORK,)))
    try:
        yield woken
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await db.dispose()


async def test_primary_killed_standby_promoted_nothing_acknowledged_is_lost(
    tmp_path: Path, cluster: ReplicatedPostgres, pair_url: str, listener: asyncio.Event
) -> None:
    ntype = "rel.failover"
    await webhook_policy(pair_url, ntype)
    async with Provider(lambda _r: Reply(delay_seconds=0.05)) as provider:
        servers = ServerFactory(tmp_path, pair_url, lease_seconds=3)
        producers = Producers(History(), ntype, "failover", "", call_timeout=5)
        try:
            server = await servers.start(channels_file=write_channels(tmp_path, provider.url()))
            producers.target = server.target
            async with producers.steady(concurrency=3, pause=0.02, limit=SENDS):
                await producers.wait_acknowledged(SENDS // 4, within=60)
                killed = time.monotonic()
                await asyncio.to_thread(cluster.fail_over)
                promoted = time.monotonic()
                before = len(producers.history.acknowledged)
                await producers.wait_acknowledged(before + 1, within=60)
                writing_again = time.monotonic()
                await producers.wait_acknowledged(before + SENDS // 4, within=60)
            # The other process's LISTEN connection followed the primary too.
            listener.clear()
            await producers.send(3, concurrency=1)
            await asyncio.wait_for(listener.wait(), 30)

            await wait_settled(lambda: server.target, ntype, producers.history, within=60)
            report = await run_checker(
                server.target, ntype, producers.history, provider.receipts, label="failover"
            )
            assert server.proc.poll() is None, "the server did not survive the failover"
            # Replication is synchronous: no warning at start (store/durability.py).
            assert "failover may lose data" not in server.output()
        finally:
            await producers.close()
            servers.stop_all()
    db = Database(pair_url)
    try:
        async with db.read() as conn:
            in_recovery = (await conn.execute(text("SELECT pg_is_in_recovery()"))).scalar()
    finally:
        await db.dispose()
    assert in_recovery is False  # the URL now leads to the promoted standby
    outage = writing_again - killed
    print(
        f"\n[failover] promote took {promoted - killed:.1f}s, first acknowledged send "
        f"{outage:.1f}s after the kill; codes {dict(producers.history.codes)}"
    )
    reliability_report.note(
        "failover", promote_seconds=promoted - killed, writing_again_seconds=outage
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
