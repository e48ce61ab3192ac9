"""The database goes away under load: PostgreSQL restarted (fast and immediate shutdown),
connections reset or silently blackholed by a TCP proxy between server and database."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from tests.reliability import report as reliability_report
from tests.reliability.checker import History
from tests.reliability.harness import (
    NOT_SERVING,
    SERVING,
    Producers,
    Provider,
    ServerFactory,
    rounds,
    run_checker,
    scaled,
    wait_health,
    wait_settled,
    webhook_policy,
    write_channels,
)
from tests.reliability.tcp_proxy import TcpProxy
from tests.support.http_receiver import Reply
from tests.support.postgres import PostgresProcess
from uns_server.store.db import PG_PING_AFTER_IDLE_SECONDS, Database


async def wait_until(predicate, within: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("mode", ["fast", "immediate"])
async def test_postgres_restart_under_load(
    tmp_path: Path, pg: PostgresProcess, database_url: str, mode: str
) -> None:
    """While PostgreSQL is down the server keeps answering: sends fail UNAVAILABLE (never
    INTERNAL), health turns NOT_SERVING; when it is back, health is SERVING again and
    nothing that was acknowledged is lost."""
    ntype = f"rel.pg.{mode}"
    target = scaled(60)
    restarts = rounds(target, 250)
    await webhook_policy(database_url, ntype)
    async with Provider(lambda _r: Reply(delay_seconds=0.1)) as provider:
        servers = ServerFactory(tmp_path, database_url, lease_seconds=3)
        producers = Producers(History(), ntype, f"pg-{mode}", "", call_timeout=5)
        downtimes: list[float] = []
        recoveries: list[float] = []
        try:
            server = await servers.start(channels_file=write_channels(tmp_path, provider.url()))
            producers.target = server.target
            async with producers.steady(concurrency=3, pause=0.05, limit=3 * target + 600):
                for r in range(restarts):
                    await producers.wait_acknowledged(30 + target * r // restarts, within=120)
                    down = time.monotonic()
                    await asyncio.to_thread(pg.stop, mode)
                    try:
                        await wait_health(server, NOT_SERVING, within=20)
                        await wait_until(
                            lambda: any(at > down for at, _code in producers.errors),  # noqa: B023
                            10,
                            "a send to fail while the database is down",
                        )
                    finally:
                        await asyncio.to_thread(pg.start)
                    downtimes.append(time.monotonic() - down)
                    recoveries.append(await wait_health(server, SERVING, within=30))
                before = len(producers.history.acknowledged)
                await producers.wait_acknowledged(max(before + 30, target), within=120)
            print(
                f"\n[pg-{mode}] {restarts} restarts, down {max(downtimes):.1f}s at most, "
                f"SERVING again {max(recoveries):.1f}s after restart at most, "
                f"send errors {dict(producers.history.codes)}"
            )
            reliability_report.note(
                f"pg-{mode}",
                restarts=restarts,
                database_down_at_most_seconds=max(downtimes),
                serving_again_at_most_seconds=max(recoveries),
            )
            await wait_settled(lambda: server.target, ntype, producers.history)
            report = await run_checker(
                server.target, ntype, producers.history, provider.receipts, label=f"pg-{mode}"
            )
        finally:
            await producers.close()
            servers.stop_all()
    report.assert_ok()
    assert report.counts()["state_delivered"] >= report.acknowledged
    codes = {code for _at, code in producers.errors}
    assert codes <= {"UNAVAILABLE"}, f"sends failed with {codes} (expected only UNAVAILABLE)"


# The Bind message of ``pg_notify('uns_events', '')``: the parameter, length-prefixed
# (the same name inside SQL text, e.g. "FROM uns_events", has no such prefix).
PG_NOTIFY_EVENTS_PARAMETER = len(b"uns_events").to_bytes(4, "big") + b"uns_events"


def via(proxy: TcpProxy, database_url: str) -> str:
    """The same database, reached through the proxy."""
    return str(make_url(database_url).set(port=proxy.port).render_as_string(hide_password=False))


@pytest.fixture
async def proxy(pg: PostgresProcess) -> AsyncIterator[TcpProxy]:
    p = TcpProxy("127.0.0.1", pg.port)
    await p.start()
    try:
        yield p
    finally:
        await p.stop()


async def test_connections_reset_under_load(
    tmp_path: Path, database_url: str, proxy: TcpProxy
) -> None:
    """Every server-to-database connection is reset, three times (more in the report
    run), while producers keep sending: calls fail UNAVAILABLE at worst, the pool
    reconnects, nothing is lost."""
    ntype = "rel.reset"
    target = scaled(60)
    cuts = max(3, target // 100)
    await webhook_policy(database_url, ntype)
    async with Provider(lambda _r: Reply(delay_seconds=0.1)) as provider:
        servers = ServerFactory(tmp_path, via(proxy, database_url), lease_seconds=3)
        producers = Producers(History(), ntype, "reset", "")
        cut = 0
        try:
            server = await servers.start(channels_file=write_channels(tmp_path, provider.url()))
            producers.target = server.target
            async with producers.steady(concurrency=3, pause=0.02, limit=3 * target + 600):
                await producers.wait_acknowledged(20)
                first_cut = time.monotonic()
                for _ in range(cuts):
                    cut += proxy.reset()
                    before = len(producers.history.acknowledged)
                    await producers.wait_acknowledged(before + target // cuts, within=60)
            await wait_settled(lambda: server.target, ntype, producers.history)
            reliability_report.note(
                "reset",
                resets=cuts,
                connections_cut=cut,
                all_delivered_after_first_cut_seconds=time.monotonic() - first_cut,
            )
            report = await run_checker(
                server.target, ntype, producers.history, provider.receipts, label="reset"
            )
        finally:
            await producers.close()
            servers.stop_all()
    print(f"[reset] connections cut: {cut}")
    assert cut >= cuts
    report.assert_ok()
    codes = {code for _at, code in producers.errors}
    assert codes <= {"UNAVAILABLE"}, f"sends failed with {codes} (expected only UNAVAILABLE)"


async def test_blackholed_database_another_server_takes_over(
    tmp_path: Path, database_url: str, proxy: TcpProxy
) -> None:
    """The first server's database connections go silent (a partition neither side can
    see) in the middle of its work: one transaction frozen after it took the event-order
    lock, sends and deliveries in flight. Its health turns NOT_SERVING; a second server,
    with its own path to the database, takes the expired leases over and delivers
    everything acknowledged by either server. When the partition heals, the first server
    is SERVING again and delivers new work itself: none of its workers stayed wedged on
    the dead connections."""
    ntype = "rel.blackhole"
    await webhook_policy(database_url, ntype)

    def decide(request):  # type: ignore[no-untyped-def]
        return Reply(delay_seconds=1.0) if request.path == "/a" else Reply()

    async with Provider(decide) as provider:
        servers = ServerFactory(tmp_path, database_url, lease_seconds=3)
        producers = Producers(History(), ntype, "blackhole", "", call_timeout=3)
        try:
            cut_off = await servers.start(
                db_url=via(proxy, database_url),
                channels_file=write_channels(tmp_path, provider.url("/a")),
            )
            producers.target = cut_off.target
            async with producers.steady(concurrency=3, pause=0.02, limit=600 + 2 * scaled(0)):
                await producers.wait_acknowledged(30)
                seen = len(provider.receipts)
                await wait_until(
                    lambda: len(provider.receipts) >= seen + 4, 30, "attempts in flight"
                )
                # Partition right after a transaction appended events (holding the
                # event-order lock) and before it commits, with deliveries in flight.
                proxy.blackhole_after(PG_NOTIFY_EVENTS_PARAMETER)
                await asyncio.wait_for(proxy.triggered.wait(), 10)
                partitioned = time.monotonic()
                try:
                    other = await servers.start(
                        channels_file=write_channels(tmp_path, provider.url("/b"))
                    )
                    producers.target = other.target
                    before = len(producers.history.acknowledged)
                    await producers.wait_acknowledged(
                        max(before + 20, scaled(0)), within=60 + scaled(0) / 5
                    )
                finally:
                    stalled = proxy.blackholed  # keep the partition until the checks below
            try:
                await wait_settled(
                    lambda: other.target,
                    ntype,
                    producers.history,
                    within=60,
                    database_url=database_url,
                )
                taken_over = time.monotonic() - partitioned
                await wait_health(cut_off, NOT_SERVING, within=30)
            finally:
                proxy.heal()
            assert stalled
            assert provider.ids("/a") & provider.ids("/b"), "nothing was taken over"
            recovery = await wait_health(cut_off, SERVING, within=30)
            reliability_report.note(
                "blackhole",
                all_delivered_after_partition_seconds=taken_over,
                serving_after_heal_seconds=recovery,
            )
            # The healed server must deliver new work on its own.
            other.stop()
            producers.target = cut_off.target
            known = set(producers.history.acknowledged)
            await producers.send(10, concurrency=2)
            await wait_settled(lambda: cut_off.target, ntype, producers.history, within=60)
            fresh = set(producers.history.acknowledged) - known
            assert len(fresh) == 10 and fresh <= provider.ids("/a")
            report = await run_checker(
                cut_off.target, ntype, producers.history, provider.receipts, label="blackhole"
            )
        finally:
            await producers.close()
            servers.stop_all()
    print(
        f"[blackhole] everything delivered {taken_over:.1f}s into the partition; "
        f"SERVING {recovery:.1f}s after it healed"
    )
    report.assert_ok()
    assert report.counts()["state_delivered"] == report.acknowledged + report.committed_unknown


async def test_partitioned_server_answers_unavailable_instead_of_hanging(
    tmp_path: Path, database_url: str, proxy: TcpProxy
) -> None:
    """While its database connection is silently blackholed, a server must still answer:
    UNAVAILABLE (retry elsewhere) within a bounded time, not hang until the deadline."""
    ntype = "rel.hang"
    servers = ServerFactory(tmp_path, via(proxy, database_url), lease_seconds=3)
    producers = Producers(History(), ntype, "hang", "", call_timeout=20)
    try:
        server = await servers.start()
        producers.target = server.target
        await producers.send(5, concurrency=1)
        proxy.blackhole()
        started = time.monotonic()
        await producers.send_one()
        took = time.monotonic() - started
    finally:
        proxy.heal()
        await producers.close()
        servers.stop_all()
    codes = [code for _at, code in producers.errors]
    print(f"\n[hang] send on a blackholed connection answered {codes} after {took:.1f}s")
    reliability_report.note("hang", answered_seconds=took)
    reliability_report.record("hang", codes=dict(producers.history.codes))
    assert codes == ["UNAVAILABLE"]


async def test_provider_observations_survive_a_database_blip(
    tmp_path: Path, pg: PostgresProcess, database_url: str
) -> None:
    """The provider answers while PostgreSQL is briefly down: once it is back, every
    answer the provider gave is in the timeline (recorded late, or fenced as LEASE_LOST).
    (The report run repeats the blip, a batch of sends each time.)"""
    ntype = "rel.blip"
    target = scaled(8)
    blips = rounds(target, 100)
    await webhook_policy(database_url, ntype)
    async with Provider(lambda _r: Reply(delay_seconds=1.5)) as provider:
        servers = ServerFactory(tmp_path, database_url, lease_seconds=3, concurrency=32)
        producers = Producers(History(), ntype, "blip", "")
        try:
            server = await servers.start(channels_file=write_channels(tmp_path, provider.url()))
            producers.target = server.target
            for _ in range(blips):
                seen = len(provider.receipts)
                await producers.send(target // blips, concurrency=4)
                await wait_until(
                    lambda: len(provider.receipts) >= seen + 4,  # noqa: B023
                    10,
                    "attempts in flight",
                )
                await asyncio.to_thread(pg.stop, "fast")
                try:
                    await asyncio.sleep(2.5)  # fault duration: the provider answers meanwhile
                finally:
                    await asyncio.to_thread(pg.start)
                await wait_settled(lambda: server.target, ntype, producers.history)
            reliability_report.note("blip", blips=blips)
            report = await run_checker(
                server.target, ntype, producers.history, provider.receipts, label="blip"
            )
        finally:
            await producers.close()
            servers.stop_all()
    report.assert_ok()
    assert not report.unrecorded_observations, report.unrecorded_observations


async def test_pooled_connections_idle_across_a_restart_are_replaced(
    pg: PostgresProcess, database_url: str
) -> None:
    """PostgreSQL restarts while the pool holds idle connections. Connections that sat
    idle are pinged at checkout (store.db), so the next transactions get live ones
    instead of failing on dead ones."""
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
        await asyncio.gather(*(holding(entered) for _ in range(4)))  # four pooled connections
        await asyncio.to_thread(pg.stop, "fast")
        await asyncio.to_thread(pg.start)
        await asyncio.sleep(2 * PG_PING_AFTER_IDLE_SECONDS)
        assert await asyncio.gather(*(one_transaction() for _ in range(4))) == [1] * 4
    finally:
        await db.dispose()
