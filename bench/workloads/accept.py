"""accept: SendNotification by 1, 16, 64 closed-loop producers, log channel, dispatch on.

Each level starts with an empty backlog (the dispatcher is given time to deliver the
previous level's notifications) and fresh statistics, so the server CPU of a level is
accept work plus whatever dispatching overlaps it, as in production.
"""

from __future__ import annotations

import asyncpg

from bench import client
from bench.config import Profile
from bench.cpu import CpuMeter
from bench.harness import TYPE_ACCEPT
from bench.stats import Row
from bench.workloads.common import closed_level, sender, wait_backlog

BACKLOG_WAIT_SECONDS = 60.0


async def run(
    target: str, db: asyncpg.Connection, profile: Profile, meter: CpuMeter, tag: str
) -> list[Row]:
    rows: list[Row] = []
    async with client.channel(target) as chan:
        call = sender(client.stub(chan), TYPE_ACCEPT, f"{tag}-accept")
        for concurrency in profile.concurrency:
            await wait_backlog(db, BACKLOG_WAIT_SECONDS)
            # The steady state from the first level on. The server analyzes a new
            # database once it holds 1,000 notifications (docs/deployment.md); the first
            # level's would run on plans cached while the table was empty.
            await db.execute("ANALYZE uns_notifications")
            row = await closed_level(
                call,
                group="uns",
                name="accept",
                concurrency=concurrency,
                seconds=profile.seconds,
                warmup_seconds=profile.warmup_seconds,
                max_ops=profile.max_ops,
                meter=meter,
            )
            left, waited = await wait_backlog(db, BACKLOG_WAIT_SECONDS)
            row.extra.update(backlog_drain_seconds=round(waited, 2), backlog_left=left)
            rows.append(row)
    return rows
