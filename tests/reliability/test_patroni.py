"""UNS on a Patroni-managed cluster (issue 35, item 2): etcd and two Patroni nodes in
synchronous mode on loopback (tests/support/patroni.py, docs/deployment.md's
patroni.yml), two UNS replicas on the multi-host URL, producers on both and a
WatchEvents subscriber cut off again and again, while the cluster changes leader:

* ``failover``: the leader's Patroni and postmaster are SIGKILLed; the synchronous
  standby takes over once the leader key expires (the DCS ``ttl``), and the killed node
  is started again and rejoins as the synchronous standby (``pg_rewind``);
* ``switchover``: a planned switchover to the synchronous standby (Patroni's REST API,
  as ``patronictl switchover``).

The checker finds nothing lost or unexpected, every duplicate provider effect flagged;
fencing tokens only move forward; the subscriber, resuming from its cursor, receives
every event once, in order; and writes are unavailable no longer than the DCS timing
allows (:data:`UNAVAILABLE_BOUND_SECONDS`). The same server processes carry on through
every change. Skipped without Debian's patroni and etcd (scripts/install-tools.sh
installs them) unless ``UNS_REQUIRE_TOOLCHAINS=1``."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import PostgresDatabases
from tests.reliability import report as reliability_report
from tests.reliability.checker import History, fencing
from tests.reliability.harness import (
    Producers,
    Provider,
    ServerFactory,
    replay_events,
    rounds,
    run_checker,
    scaled,
    wait_settled,
    webhook_policy,
    write_channels,
)
from tests.reliability.test_watch_faults import Subscriber
from tests.support import patroni
from tests.support.http_receiver import Reply
from tests.support.patroni import PatroniCluster

SENDS = 240
# One leader change per this many acknowledged sends (at least one): the report run
# (UNS_RELIABILITY_SENDS=1000) changes leaders twice.
SENDS_PER_CHANGE = 400
# The servers' bound on a statement or connection attempt.
COMMAND_TIMEOUT_SECONDS = 2.0
# The producers' retry backoff tops out at 1 s (harness.Producers.send_until_known).
PRODUCER_BACKOFF_SECONDS = 1.0
# The longest writes may be unavailable: Patroni's bound on a leaderless cluster (the
# DCS ttl + loop_wait + retry_timeout), then a server's statement bound and a
# producer's backoff before the next OK. Configured values, not measured ones.
UNAVAILABLE_BOUND_SECONDS = (
    patroni.LEADERLESS_BOUND_SECONDS + COMMAND_TIMEOUT_SECONDS + PRODUCER_BACKOFF_SECONDS
)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[PatroniCluster]:
    built = PatroniCluster(keep_logs=tmp_path)  # skips (fails in CI) without the binaries
    try:
        built.start()
        yield built
    finally:
        built.destroy()


def unavailable_seconds(answered_ok: list[float], fault: float, after: float) -> float:
    """The longest time without an OK answer, from the last OK before ``fault`` to the
    first one after ``after`` (the cluster had its new leader then)."""
    times = sorted(answered_ok)
    before = [t for t in times if t <= fault]
    later = [t for t in times if t >= after]
    assert before and later, "no OK answer on one side of the fault"
    span = [t for t in times if before[-1] <= t <= later[0]]
    return max(b - a for a, b in itertools.pairwise(span))


async def first_ok_after(producers: list[Producers], moment: float, within: float) -> None:
    deadline = time.monotonic() + within
    while not any(t >= moment for p in producers for t in p.answered_ok):
        assert time.monotonic() < deadline, f"no OK answer within {within}s of the new leader"
        await asyncio.sleep(0.1)


async def change_leader(
    cluster: PatroniCluster, fault: str
) -> tuple[float, float, dict[str, float]]:
    """Inject ``fault`` once; returns when it was injected, when the new leader was
    running, and what was measured, once the cluster has a synchronous standby again
    (a killed node is started again and rejoins meanwhile)."""
    injected = time.monotonic()
    if fault == "failover":
        killed, survivor = await asyncio.to_thread(cluster.fail_over)
        promoted = await asyncio.to_thread(
            cluster.wait_until,
            lambda: cluster.leader() is survivor,
            f"{survivor.name} promoted",
            patroni.LEADERLESS_BOUND_SECONDS * 2,
        )
        leading = time.monotonic()
        # Patroni, by its DCS timing, bounds the promotion.
        assert promoted <= patroni.LEADERLESS_BOUND_SECONDS, (
            f"{survivor.name} promoted after {promoted:.1f}s, past the DCS bound "
            f"{patroni.LEADERLESS_BOUND_SECONDS}s\n{cluster.logs()}"
        )
        await asyncio.to_thread(killed.start)
        rejoined = await asyncio.to_thread(cluster.wait_healthy)
        assert cluster.leader() is survivor, "the killed node came back as the leader"
        return injected, leading, {"promoted_seconds": promoted, "rejoined_seconds": rejoined}
    _old, new = await asyncio.to_thread(cluster.switchover)
    await asyncio.to_thread(
        cluster.wait_until, lambda: cluster.leader() is new, f"{new.name} the leader"
    )
    leading = time.monotonic()
    synchronous = await asyncio.to_thread(cluster.wait_healthy)
    return (
        injected,
        leading,
        {"switched_seconds": leading - injected, "standby_synchronous_seconds": synchronous},
    )


@pytest.mark.parametrize("fault", ["failover", "switchover"])
async def test_leader_changes_under_load_lose_nothing_acknowledged(
    tmp_path: Path, cluster: PatroniCluster, fault: str
) -> None:
    label = f"patroni-{fault}"
    leader = cluster.leader()
    assert leader is not None
    name = (
        await PostgresDatabases(
            f"postgresql+asyncpg://postgres@127.0.0.1:{leader.pg_port}/postgres"
        ).new()
    ).rsplit("/", 1)[1]
    url = cluster.url(name)
    ntype = f"rel.{label}"
    await webhook_policy(url, ntype)
    target = scaled(SENDS)
    changes = rounds(target, SENDS_PER_CHANGE)
    measured: list[dict[str, float]] = []
    windows: list[float] = []
    async with Provider(lambda _r: Reply(delay_seconds=0.05)) as provider:
        servers = ServerFactory(
            tmp_path,
            url,
            lease_seconds=3,
            extra=("--db-command-timeout-seconds", str(COMMAND_TIMEOUT_SECONDS)),
        )
        channels = write_channels(tmp_path, provider.url())
        history = History()
        first = Producers(history, ntype, f"{fault}-a", "", call_timeout=10)
        second = Producers(history, ntype, f"{fault}-b", "", call_timeout=10)
        stop = asyncio.Event()
        watching: asyncio.Task[None] | None = None
        try:
            a = await servers.start(channels_file=channels)
            b = await servers.start(channels_file=channels)
            first.target, second.target = a.target, b.target
            subscriber = Subscriber(ntype, [a.target, b.target], random.Random(35))
            watching = asyncio.create_task(subscriber.run(stop))
            async with (
                first.steady(concurrency=2, pause=0.02, limit=target),
                second.steady(concurrency=1, pause=0.02, limit=target // 2),
            ):
                for n in range(1, changes + 1):
                    await first.wait_acknowledged(n * target // (changes + 1), within=120)
                    injected, leading, seconds = await change_leader(cluster, fault)
                    await first_ok_after([first, second], leading, UNAVAILABLE_BOUND_SECONDS)
                    answered = first.answered_ok + second.answered_ok
                    windows.append(unavailable_seconds(answered, injected, leading))
                    measured.append(seconds)
                await first.wait_acknowledged(target, within=120)
            await wait_settled(lambda: a.target, ntype, history, within=90)
            expected = await replay_events(a.target, ntype)
            deadline = time.monotonic() + 30
            while subscriber.cursor < expected[-1].sequence:
                assert time.monotonic() < deadline, "the subscriber never caught up"
                await asyncio.sleep(0.1)
            stop.set()
            await asyncio.wait_for(watching, 15)
            fenced = fencing(expected)
            reliability_report.note(
                label,
                **{"failovers" if fault == "failover" else "switchovers": changes},
                unavailable_seconds=max(windows),
                unavailable_bound_seconds=UNAVAILABLE_BOUND_SECONDS,
                **{k: max(m[k] for m in measured) for k in measured[0]},
                fencing=fenced.counts(),
                watch_events=len(subscriber.received),
                watch_connections=subscriber.connections,
            )
            report = await run_checker(a.target, ntype, history, provider.receipts, label=label)
            for server in (a, b):
                assert server.proc.poll() is None, f"a server did not survive:\n{server.output()}"
                # Patroni's synchronous mode names the standby: no warning at start.
                assert "failover may lose data" not in server.output()
        finally:
            stop.set()
            if watching is not None and not watching.done():
                watching.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watching
            await first.close()
            await second.close()
            servers.stop_all()
    print(
        f"\n[{label}] {changes} change(s); unavailable {[round(w, 1) for w in windows]} s "
        f"(bound {UNAVAILABLE_BOUND_SECONDS} s); {measured}; fencing {fenced.counts()}; "
        f"watch {len(subscriber.received)} events over {subscriber.connections} connections"
    )
    report.assert_ok()
    assert not report.lost and not report.unexpected
    assert report.acknowledged >= target
    assert not fenced.problems, fenced.problems[:10]
    assert fenced.claims >= report.acknowledged
    # The subscriber saw exactly the committed history, once each, in order.
    got = [e.sequence for e in subscriber.received]
    assert got == sorted(set(got)), "an event twice or out of order"
    assert [e.id for e in subscriber.received] == [e.id for e in expected]
    assert max(windows) <= UNAVAILABLE_BOUND_SECONDS, (
        f"writes unavailable for {max(windows):.1f}s, past {UNAVAILABLE_BOUND_SECONDS}s"
    )
    codes = {code for _at, code in first.errors + second.errors}
    assert codes <= {"UNAVAILABLE"}, f"sends failed with {codes} (expected only UNAVAILABLE)"
