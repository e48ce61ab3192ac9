"""Shared pieces of the workloads: a closed-loop level as a table row, backlog waits,
and the servers a workload measures (one, or each tree of a before/after pair)."""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from bench import client
from bench.cpu import CpuMeter
from bench.stats import Row


def sender(stub: client.AsyncStub, notification_type: str, prefix: str) -> client.Call:
    """A call that sends one notification with a fresh idempotency key."""
    sequence = itertools.count()

    async def call(_n: int) -> None:
        key = f"{prefix}-{next(sequence)}"
        await stub.SendNotification(
            client.send_request(notification_type, key),
            metadata=client.METADATA,
            timeout=client.CALL_TIMEOUT_SECONDS,
        )

    return call


async def closed_level(
    call: client.Call,
    *,
    group: str,
    name: str,
    concurrency: int,
    seconds: float,
    warmup_seconds: float,
    max_ops: int,
    meter: CpuMeter,
) -> Row:
    """Warm up, then one measured closed-loop window at ``concurrency``."""
    if warmup_seconds > 0:
        await client.closed_loop(
            call, concurrency=concurrency, seconds=warmup_seconds, max_ops=max_ops
        )
    meter.start()
    result = await client.closed_loop(
        call, concurrency=concurrency, seconds=seconds, max_ops=max_ops
    )
    window = meter.stop()
    note = f"{result.errors} errors ({result.first_error})" if result.errors else ""
    return Row(
        group=group,
        name=name,
        setting=f"c={concurrency}",
        ops=result.ops,
        seconds=result.seconds,
        latencies_ms=result.latencies_ms,
        server_cpu_s=window.server,
        db_cpu_s=window.db,
        client_cpu_s=window.client,
        note=note,
    )


async def pending(conn: asyncpg.Connection) -> int:
    value = await conn.fetchval("SELECT count(*) FROM uns_notifications WHERE status = 'PENDING'")
    return int(value)


async def wait_backlog(conn: asyncpg.Connection, limit_seconds: float) -> tuple[int, float]:
    """Wait for the dispatcher to empty the PENDING backlog: (left, seconds waited)."""
    started = time.monotonic()
    left = await pending(conn)
    while left and time.monotonic() - started < limit_seconds:
        await asyncio.sleep(0.25)
        left = await pending(conn)
    return left, time.monotonic() - started


@dataclass
class Contestant:
    """A server a workload measures, its database and its meter. ``tree`` is "" in a
    run without pairs, else "before" or "after" (``python -m bench --before REV``)."""

    target: str
    db: asyncpg.Connection
    meter: CpuMeter
    tree: str = ""
    extra: dict[str, Any] = field(default_factory=dict)  # copied into each of its rows

    def variant(self, round_no: int) -> str:
        return f"{self.tree} {round_no + 1}" if self.tree else ""

    def mark(self, row: Row, round_no: int) -> Row:
        row.variant = self.variant(round_no)
        row.extra.update(self.extra)
        return row


def schedule(contestants: int, rounds: int) -> list[tuple[int, int]]:
    """(round, contestant) in measuring order at one level: every round measures each
    contestant once, the odd rounds in reverse (before, after, after, before, ...), so
    a load that drifts steadily through the level, and whatever one window leaves
    behind for the next (autovacuum, a checkpoint), weigh on both sides alike."""
    order = list(range(contestants))
    return [(r, i) for r in range(rounds) for i in (order if r % 2 == 0 else order[::-1])]
