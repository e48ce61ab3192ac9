"""Server processes that die or stall mid-dispatch: SIGKILL and restart, SIGSTOP past
the lease while a second server takes over, then SIGCONT."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

from tests.reliability import report as reliability_report
from tests.reliability.checker import History
from tests.reliability.harness import (
    Producers,
    Provider,
    ServerFactory,
    replay_events,
    run_checker,
    wait_settled,
    webhook_policy,
    write_channels,
)
from tests.support.http_receiver import Reply


async def wait_until(predicate, within: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def test_sigkill_mid_dispatch_then_restart(tmp_path: Path, database_url: str) -> None:
    """A server killed with attempts in flight loses nothing: after its leases expire the
    restarted server recovers every claimed row (flagged as a possible repeat), and every
    acknowledged notification is delivered; the provider sees duplicates only there."""
    ntype = "rel.sigkill"
    await webhook_policy(database_url, ntype)
    async with Provider(lambda _r: Reply(delay_seconds=0.5)) as provider:
        servers = ServerFactory(tmp_path, database_url, lease_seconds=3)
        producers = Producers(History(), ntype, "kill", "")
        try:
            first = await servers.start(channels_file=write_channels(tmp_path, provider.url()))
            producers.target = first.target
            async with producers.steady(concurrency=3, pause=0.02, limit=400):
                await wait_until(lambda: len(provider.receipts) >= 20, 30, "deliveries in flight")
                first.proc.kill()  # sends and deliveries in flight
                await asyncio.to_thread(first.proc.wait)
                killed = time.monotonic()
                second = await servers.start(channels_file=write_channels(tmp_path, provider.url()))
                producers.target = second.target
                await producers.wait_acknowledged(150, within=60)
            views = await wait_settled(lambda: second.target, ntype, producers.history)
            reliability_report.note(
                "sigkill", all_delivered_after_kill_seconds=time.monotonic() - killed
            )
            report = await run_checker(
                second.target, ntype, producers.history, provider.receipts, label="sigkill"
            )
        finally:
            await producers.close()
            servers.stop_all()
    report.assert_ok()
    acked = set(producers.history.acknowledged)
    assert {v.id for v in views if v.state == "DELIVERED"} >= acked
    assert report.recovered_attempts >= 1, "the kill did not interrupt any attempt"


async def test_sigstop_past_lease_is_fenced_after_takeover(
    tmp_path: Path, database_url: str
) -> None:
    """A server frozen (SIGSTOP) with attempts in flight outlives its leases; a second
    server takes the rows over and delivers them. Thawed (SIGCONT), the first server's
    late settlements are fenced: each is recorded as LEASE_LOST, nothing is DELIVERED
    twice, and the provider's second acceptance is explained by that LEASE_LOST."""
    ntype = "rel.sigstop"
    await webhook_policy(database_url, ntype)

    def decide(request):  # type: ignore[no-untyped-def]
        # The first server's provider is slow, so the freeze catches attempts in flight.
        return Reply(delay_seconds=1.0) if request.path == "/a" else Reply()

    async with Provider(decide) as provider:
        servers = ServerFactory(tmp_path, database_url, lease_seconds=3, concurrency=8)
        producers = Producers(History(), ntype, "stop", "")
        try:
            frozen = await servers.start(channels_file=write_channels(tmp_path, provider.url("/a")))
            producers.target = frozen.target
            await producers.send(40, concurrency=4)
            # Freeze right after a fresh batch of requests reached the provider.
            seen = len(provider.receipts)
            await wait_until(lambda: len(provider.receipts) >= seen + 4, 30, "attempts in flight")
            frozen.proc.send_signal(signal.SIGSTOP)
            stopped = time.monotonic()
            try:
                taker = await servers.start(
                    channels_file=write_channels(tmp_path, provider.url("/b"))
                )
                producers.target = taker.target
                await wait_settled(
                    lambda: taker.target,
                    ntype,
                    producers.history,
                    within=60,
                    database_url=database_url,
                )
                reliability_report.note(
                    "sigstop", all_delivered_after_freeze_seconds=time.monotonic() - stopped
                )
            finally:
                frozen.proc.send_signal(signal.SIGCONT)
            stolen = provider.ids("/a") & provider.ids("/b")
            assert stolen, "the second server took over nothing"

            # Every attempt the frozen server left unsettled is fenced once it thaws.
            async def fenced() -> tuple[int, int]:
                events = await replay_events(taker.target, ntype)
                lost = sum(e.kind == "LEASE_LOST" for e in events)
                recovered = sum(
                    e.kind == "ATTEMPT_STARTED"
                    and bool(e.payload.get("recovery_may_repeat_provider_effect"))
                    for e in events
                )
                return lost, recovered

            deadline = time.monotonic() + 30
            while (counts := await fenced())[0] < counts[1]:
                assert time.monotonic() < deadline, f"LEASE_LOST/recovered = {counts}"
                await asyncio.sleep(0.5)
            report = await run_checker(
                taker.target, ntype, producers.history, provider.receipts, label="sigstop"
            )
        finally:
            await producers.close()
            servers.stop_all()
    report.assert_ok()
    assert report.lease_lost >= 1 and report.lease_lost == report.recovered_attempts
    assert report.counts()["state_delivered"] == report.acknowledged + report.committed_unknown
