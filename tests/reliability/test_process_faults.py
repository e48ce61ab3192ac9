"""Server processes that die or stall mid-dispatch: SIGKILL and restart, SIGSTOP past
the lease (alone, or while a second server takes over), then SIGCONT."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable
from pathlib import Path

from tests.reliability import report as reliability_report
from tests.reliability.checker import History
from tests.reliability.harness import (
    Producers,
    Provider,
    ServerFactory,
    dialect,
    replay_events,
    rounds,
    run_checker,
    scaled,
    wait_settled,
    webhook_policy,
    write_channels,
)
from tests.support.http_receiver import Reply

LEASE_SECONDS = 3.0


async def wait_until(predicate: Callable[[], bool], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def requests_in_flight(provider: Provider, more: int, within: float = 30) -> None:
    """Wait until ``more`` further requests reached the provider."""
    seen = len(provider.receipts)
    await wait_until(lambda: len(provider.receipts) >= seen + more, within, "attempts in flight")


async def test_sigkill_mid_dispatch_then_restart(tmp_path: Path, any_db_url: str) -> None:
    """A server killed with attempts in flight loses nothing: after its leases expire the
    restarted server recovers every claimed row (flagged as a possible repeat), and every
    acknowledged notification is delivered; the provider sees duplicates only there.
    Producers retry sends whose outcome the kill hid, with the same key, on the new
    server. (The report run kills the server again and again.)"""
    ntype = "rel.sigkill"
    target = scaled(150)
    kills = rounds(target, 200)
    await webhook_policy(any_db_url, ntype)
    async with Provider(lambda _r: Reply(delay_seconds=0.5)) as provider:
        servers = ServerFactory(tmp_path, any_db_url, lease_seconds=LEASE_SECONDS)
        producers = Producers(History(), ntype, "kill", "")
        channels = write_channels(tmp_path, provider.url())
        try:
            server = await servers.start(channels_file=channels)
            producers.target = server.target
            first_kill = 0.0
            async with producers.steady(concurrency=3, pause=0.02, limit=3 * target + 600):
                for k in range(kills):
                    await requests_in_flight(provider, 20)
                    server.proc.kill()  # sends and deliveries in flight
                    await asyncio.to_thread(server.proc.wait)
                    first_kill = first_kill or time.monotonic()
                    server = await servers.start(channels_file=channels)
                    producers.target = server.target
                    await producers.wait_acknowledged(target * (k + 1) // kills, within=120)
            views = await wait_settled(lambda: server.target, ntype, producers.history)
            reliability_report.note(
                "sigkill",
                kills=kills,
                all_delivered_after_first_kill_seconds=time.monotonic() - first_kill,
            )
            report = await run_checker(
                server.target,
                ntype,
                producers.history,
                provider.receipts,
                label="sigkill",
                database=dialect(any_db_url),
            )
        finally:
            await producers.close()
            servers.stop_all()
    report.assert_ok()
    acked = set(producers.history.acknowledged)
    assert {v.id for v in views if v.state == "DELIVERED"} >= acked
    assert report.recovered_attempts >= 1, "the kill did not interrupt any attempt"


async def test_sigstop_past_lease_then_sigcont(tmp_path: Path, any_db_url: str) -> None:
    """The only server is frozen (SIGSTOP, as a long GC or VM pause would) with attempts
    in flight until its leases expire, then thawed: the late answers are recorded,
    settled or fenced; the expired leases are recovered; nothing is lost or settled
    twice. (The report run freezes it again and again under load.)"""
    ntype = "rel.pause"
    target = scaled(60)
    pauses = rounds(target, 250)
    await webhook_policy(any_db_url, ntype)
    async with Provider(lambda _r: Reply(delay_seconds=0.5)) as provider:
        servers = ServerFactory(tmp_path, any_db_url, lease_seconds=LEASE_SECONDS)
        producers = Producers(History(), ntype, "pause", "", call_timeout=2)
        try:
            server = await servers.start(channels_file=write_channels(tmp_path, provider.url()))
            producers.target = server.target
            async with producers.steady(concurrency=3, pause=0.02, limit=3 * target + 600):
                for p in range(pauses):
                    await requests_in_flight(provider, 8)
                    server.proc.send_signal(signal.SIGSTOP)
                    try:
                        await asyncio.sleep(LEASE_SECONDS + 1.5)
                    finally:
                        server.proc.send_signal(signal.SIGCONT)
                    await producers.wait_acknowledged(target * (p + 1) // pauses, within=120)
            await wait_settled(lambda: server.target, ntype, producers.history)
            reliability_report.note("pause", pauses=pauses, pause_seconds=LEASE_SECONDS + 1.5)
            report = await run_checker(
                server.target,
                ntype,
                producers.history,
                provider.receipts,
                label="pause",
                database=dialect(any_db_url),
            )
        finally:
            await producers.close()
            servers.stop_all()
    report.assert_ok()
    assert report.counts()["state_delivered"] == report.acknowledged + report.committed_unknown


async def test_sigstop_past_lease_is_fenced_after_takeover(
    tmp_path: Path, database_url: str
) -> None:
    """A server frozen (SIGSTOP) with attempts in flight outlives its leases; a second
    server takes the rows over and delivers them. Thawed (SIGCONT), the first server's
    late settlements are fenced: each is recorded as LEASE_LOST, nothing is DELIVERED
    twice, and the provider's second acceptance is explained by that LEASE_LOST.
    (PostgreSQL only: SQLite serves one process. The report run repeats the round.)"""
    ntype = "rel.sigstop"
    target = scaled(40)
    batches = rounds(target, 250)
    await webhook_policy(database_url, ntype)

    def decide(request):  # type: ignore[no-untyped-def]
        # The first server's provider is slow, so the freeze catches attempts in flight.
        return Reply(delay_seconds=1.0) if request.path == "/a" else Reply()

    async with Provider(decide) as provider:
        servers = ServerFactory(tmp_path, database_url, lease_seconds=LEASE_SECONDS)
        producers = Producers(History(), ntype, "stop", "")
        took: list[float] = []
        try:
            for batch in range(batches):
                frozen = await servers.start(
                    channels_file=write_channels(tmp_path, provider.url("/a"))
                )
                producers.target = frozen.target
                await producers.send(target // batches, concurrency=4)
                # Freeze right after a fresh batch of requests reached the provider.
                await requests_in_flight(provider, 4)
                frozen.proc.send_signal(signal.SIGSTOP)
                stopped = time.monotonic()
                try:
                    taker = await servers.start(
                        channels_file=write_channels(tmp_path, provider.url("/b"))
                    )
                    producers.target = taker.target
                    await wait_settled(
                        lambda: taker.target,  # noqa: B023 (awaited within the iteration)
                        ntype,
                        producers.history,
                        within=60,
                        database_url=database_url,
                    )
                    took.append(time.monotonic() - stopped)
                finally:
                    frozen.proc.send_signal(signal.SIGCONT)
                await wait_fenced(taker.target, ntype)
                if batch < batches - 1:
                    frozen.stop()
                    taker.stop()
            stolen = provider.ids("/a") & provider.ids("/b")
            assert stolen, "the second server took over nothing"
            reliability_report.note(
                "sigstop",
                rounds=batches,
                all_delivered_after_freeze_seconds=max(took),
            )
            report = await run_checker(
                taker.target, ntype, producers.history, provider.receipts, label="sigstop"
            )
        finally:
            await producers.close()
            servers.stop_all()
    report.assert_ok()
    assert report.lease_lost >= 1 and report.lease_lost == report.recovered_attempts
    assert report.counts()["state_delivered"] == report.acknowledged + report.committed_unknown


async def wait_fenced(target: str, ntype: str, within: float = 30) -> None:
    """Until every attempt a frozen server left unsettled is fenced (LEASE_LOST)."""

    async def fenced() -> tuple[int, int]:
        events = await replay_events(target, ntype)
        lost = sum(e.kind == "LEASE_LOST" for e in events)
        recovered = sum(
            e.kind == "ATTEMPT_STARTED"
            and bool(e.payload.get("recovery_may_repeat_provider_effect"))
            for e in events
        )
        return lost, recovered

    deadline = time.monotonic() + within
    while (counts := await fenced())[0] < counts[1]:
        assert time.monotonic() < deadline, f"LEASE_LOST/recovered = {counts}"
        await asyncio.sleep(0.5)
