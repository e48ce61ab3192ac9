"""A provider that flaps between 500, 429 with Retry-After, slow answers past the client
timeout, hanging connections and dropped connections: everything still converges."""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from pathlib import Path

from tests.reliability import report as reliability_report
from tests.reliability.checker import History
from tests.reliability.harness import (
    Producers,
    Provider,
    ServerFactory,
    dialect,
    run_checker,
    scaled,
    wait_settled,
    webhook_policy,
    write_channels,
)
from tests.support.http_receiver import RecordedRequest, Reply

CLIENT_TIMEOUT_SECONDS = 1.0
FAULTS = {
    "500": Reply(status=500, body=b"oops"),
    "503": Reply(status=503, headers={"retry-after": "1"}),
    "429": Reply(status=429, headers={"retry-after": "1"}),
    # Answers 200, but only after the client gave up: the provider may have acted.
    "slow": Reply(status=200, delay_seconds=CLIENT_TIMEOUT_SECONDS + 0.5),
    "hang": Reply(action="hang"),
    "close": Reply(action="close"),
}
KINDS = sorted(FAULTS)


def schedule(webhook_id: str) -> list[str]:
    """0-3 faults before success, fixed per notification (a seeded, repeatable flap)."""
    digest = hashlib.sha256(webhook_id.encode()).digest()
    return [KINDS[b % len(KINDS)] for b in digest[1 : 1 + digest[0] % 4]]


async def test_flapping_provider_converges(tmp_path: Path, any_db_url: str) -> None:
    flaky, doomed = "rel.flap", "rel.flap.doomed"
    target = scaled(60)
    await webhook_policy(any_db_url, flaky, max_attempts=10)
    await webhook_policy(any_db_url, doomed, max_attempts=2)
    attempts: Counter[str] = Counter()
    injected: Counter[str] = Counter()

    def decide(request: RecordedRequest) -> Reply:
        webhook_id = request.headers.get("webhook-id", "")
        if request.json()["data"]["notification_type"] == doomed:
            injected["500"] += 1
            return FAULTS["500"]  # never accepted: dead-lettered after max_attempts
        plan = schedule(webhook_id)
        n = attempts[webhook_id]
        attempts[webhook_id] += 1
        if n < len(plan):
            injected[plan[n]] += 1
            return FAULTS[plan[n]]
        return Reply()

    async with Provider(decide) as provider:
        servers = ServerFactory(tmp_path, any_db_url, lease_seconds=10, concurrency=32)
        history = History()
        producers = Producers(history, flaky, "flap", "")
        failing = Producers(history, doomed, "doomed", "")
        try:
            server = await servers.start(
                channels_file=write_channels(
                    tmp_path, provider.url(), timeout_seconds=CLIENT_TIMEOUT_SECONDS
                )
            )
            producers.target = failing.target = server.target
            sending = time.monotonic()
            await producers.send(target, concurrency=4)
            await failing.send(5, concurrency=1)
            await wait_settled(
                lambda: server.target, [flaky, doomed], history, within=90 + target / 5
            )
            reliability_report.note(
                "flapping",
                all_settled_seconds=time.monotonic() - sending,
                injected_faults=dict(injected),
            )
            report = await run_checker(
                server.target,
                [flaky, doomed],
                history,
                provider.receipts,
                label="flapping",
                database=dialect(any_db_url),
            )
        finally:
            await producers.close()
            await failing.close()
            servers.stop_all()
    print(f"[provider] injected faults: {dict(injected)}")
    report.assert_ok()
    assert report.counts()["state_delivered"] == target
    assert report.counts()["state_failed"] == 5  # dead-lettered, with the provider's error
    assert set(injected) == set(KINDS), injected
