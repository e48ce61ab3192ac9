"""UNS behind pgbouncer (issue 35, item 3): Debian's pgbouncer 1.18, which keeps no
prepared statements in transaction mode and drops LISTEN/NOTIFY there.

The pool goes through a transaction-pooling pgbouncer and the LISTEN connection does
not (``--listen-database-url``: PostgreSQL itself, or a session-pooling pgbouncer);
under load, with the pgbouncer restarted now and then, nothing acknowledged is lost.
A LISTEN pointed at transaction pooling by mistake (explicitly, or by leaving the
setting unset) fails the start-up NOTIFY self-test: the server refuses to start and
names the setting. Skipped without the binary (scripts/install-tools.sh installs it)
unless ``UNS_REQUIRE_TOOLCHAINS=1``."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability import report as reliability_report
from tests.reliability.checker import History
from tests.reliability.harness import (
    Producers,
    Provider,
    ServerFactory,
    rounds,
    run_checker,
    scaled,
    wait_settled,
    webhook_policy,
    write_channels,
)
from tests.support.http_receiver import Reply
from tests.support.pgbouncer import PgBouncer
from tests.support.postgres import PostgresProcess

SENDS = 200
SENDS_PER_RESTART = 250
LABEL = "pgbouncer"


@pytest.fixture
def transaction_pool(pg: PostgresProcess) -> Iterator[PgBouncer]:
    bouncer = PgBouncer(pg, pool_mode="transaction")
    bouncer.start()
    try:
        yield bouncer
    finally:
        bouncer.destroy()


@pytest.fixture
def session_pool(pg: PostgresProcess) -> Iterator[PgBouncer]:
    bouncer = PgBouncer(pg, pool_mode="session")
    bouncer.start()
    try:
        yield bouncer
    finally:
        bouncer.destroy()


def database_name(url: str) -> str:
    return url.rsplit("/", 1)[1]


async def test_pool_behind_transaction_pooling_loses_nothing_acknowledged(
    tmp_path: Path,
    database_url: str,
    transaction_pool: PgBouncer,
    session_pool: PgBouncer,
) -> None:
    name = database_name(database_url)
    ntype = "rel.pgbouncer"
    await webhook_policy(database_url, ntype)
    target = scaled(SENDS)
    async with Provider(lambda _r: Reply(delay_seconds=0.05)) as provider:
        servers = ServerFactory(tmp_path, transaction_pool.url(name))
        channels = write_channels(tmp_path, provider.url())
        history = History()
        first = Producers(history, ntype, "pgb-a", "", call_timeout=10)
        second = Producers(history, ntype, "pgb-b", "", call_timeout=10)
        try:
            # Both start only once their NOTIFY self-test passed: direct, and session.
            direct = await servers.start(channels_file=channels, listen_database_url=database_url)
            session = await servers.start(
                channels_file=channels, listen_database_url=session_pool.url(name)
            )
            first.target, second.target = direct.target, session.target
            async with (
                first.steady(concurrency=2, pause=0.02, limit=target),
                second.steady(concurrency=1, pause=0.02, limit=target // 2),
            ):
                restarts = rounds(target, SENDS_PER_RESTART)
                for n in range(1, restarts + 1):
                    await first.wait_acknowledged(n * target // (restarts + 1), within=90)
                    # Every pooled server connection ends; the pools reconnect.
                    await asyncio.to_thread(transaction_pool.stop)
                    await asyncio.to_thread(transaction_pool.start)
                await first.wait_acknowledged(target, within=120)
            await wait_settled(lambda: direct.target, ntype, history, within=90)
            reliability_report.note(LABEL, restarts=restarts)
            report = await run_checker(
                direct.target, ntype, history, provider.receipts, label=LABEL
            )
            for server in (direct, session):
                assert server.proc.poll() is None, server.output()
        finally:
            await first.close()
            await second.close()
            servers.stop_all()
    report.assert_ok()
    assert not report.lost and not report.unexpected
    assert report.acknowledged >= target
    codes = {code for _at, code in first.errors + second.errors}
    assert codes <= {"UNAVAILABLE"}, f"sends failed with {codes} (expected only UNAVAILABLE)"


@pytest.mark.parametrize("listen", ["unset", "transaction"])
async def test_a_listen_behind_transaction_pooling_refuses_to_start(
    tmp_path: Path, database_url: str, transaction_pool: PgBouncer, listen: str
) -> None:
    """The pool through transaction pooling, and the LISTEN too: by default (the
    setting left unset) or pointed there explicitly. The self-test's NOTIFY never
    arrives; the server exits 2 naming the setting, never serving."""
    pooled = transaction_pool.url(database_name(database_url))
    servers = ServerFactory(tmp_path, pooled)
    flags = {"listen_database_url": pooled} if listen == "transaction" else {}
    try:
        server = await servers.start(wait=False, **flags)
        code = await asyncio.to_thread(server.proc.wait, 120)
        output = server.output()
    finally:
        servers.stop_all()
    assert code == 2, output
    assert "LISTEN/NOTIFY self-test failed" in output
    assert "--listen-database-url" in output and "UNS_LISTEN_DATABASE_URL" in output
    assert "ready: database reachable" not in output
