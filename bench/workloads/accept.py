"""accept: SendNotification by 1, 16, 64 closed-loop producers, log channel, dispatch on.

Each level starts with an empty backlog (the dispatcher is given time to deliver the
previous level's notifications) and fresh statistics, so the server CPU of a level is
accept work plus whatever dispatching overlaps it, as in production.
"""

from __future__ import annotations

import contextlib

from bench import client
from bench.config import Profile
from bench.harness import TYPE_ACCEPT
from bench.stats import Row
from bench.workloads.common import Contestant, closed_level, schedule, sender, wait_backlog

BACKLOG_WAIT_SECONDS = 60.0


async def run(
    contestants: list[Contestant], profile: Profile, tag: str, rounds: int = 1
) -> list[Row]:
    """Each level measured on every contestant, ``rounds`` times, interleaved."""
    rows: list[Row] = []
    async with contextlib.AsyncExitStack() as stack:
        calls = []
        for k in contestants:
            chan = await stack.enter_async_context(client.channel(k.target))
            calls.append(sender(client.stub(chan), TYPE_ACCEPT, f"{tag}-accept{k.tree}"))
        for concurrency in profile.concurrency:
            for round_no, i in schedule(len(contestants), rounds):
                k = contestants[i]
                await wait_backlog(k.db, BACKLOG_WAIT_SECONDS)
                # The steady state from the first level on. The server analyzes a new
                # database once it holds 1,000 notifications (docs/deployment.md); the
                # first level's would run on plans cached while the table was empty.
                await k.db.execute("ANALYZE uns_notifications")
                row = await closed_level(
                    calls[i],
                    group="uns",
                    name="accept",
                    concurrency=concurrency,
                    seconds=profile.seconds,
                    warmup_seconds=profile.warmup_seconds,
                    max_ops=profile.max_ops,
                    meter=k.meter,
                )
                left, waited = await wait_backlog(k.db, BACKLOG_WAIT_SECONDS)
                row.extra.update(backlog_drain_seconds=round(waited, 2), backlog_left=left)
                rows.append(k.mark(row, round_no))
    return rows
