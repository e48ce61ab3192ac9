"""processes: accept throughput of one ``uns-server --processes N`` at N = 1, 2, and more
where the machine has the cores (issue 33 items 4 and 5).

Each N gets a fresh database and its own server (a supervisor and N children on one
port), then one closed-loop level: ``PRODUCERS`` producers, each on a connection of its
own (the kernel spreads connections between the children by hash; one shared HTTP/2
connection would land on one child), SendNotification on the ``log`` channel with
dispatch on, as the accept workload. The server CPU column is the supervisor and all
its children. Every row carries the load average at its start and end: a second
process only helps with a core that the first one, PostgreSQL and the load generator
leave idle, and a busy neighbour takes exactly that core.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time

import asyncpg

from bench import client
from bench.config import Profile
from bench.cpu import CpuMeter
from bench.harness import TYPE_ACCEPT, Harness, ServerChild
from bench.stats import Row
from bench.workloads.common import closed_level, sender, wait_backlog

PRODUCERS = 16
READY_TIMEOUT_SECONDS = 60.0
READY_LINE = '"message": "ready: database reachable and migrated"'


def process_counts(cores: int | None) -> tuple[int, ...]:
    """1 and 2 always; then doubling while the machine has that many cores."""
    counts = [1, 2]
    while counts[-1] * 2 <= (cores or 1):
        counts.append(counts[-1] * 2)
    return tuple(counts)


async def wait_children_ready(server: ServerChild, processes: int) -> None:
    """Health answers SERVING as soon as one child is ready: wait for all N."""
    await server.wait_serving()
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while server.log_path.read_text(errors="replace").count(READY_LINE) < processes:
        if time.monotonic() > deadline:
            raise RuntimeError(f"not every child of {server.label} became ready: {server.tail()}")
        await asyncio.sleep(0.1)


async def run(harness: Harness, profile: Profile, tag: str) -> list[Row]:
    rows: list[Row] = []
    for processes in process_counts(os.cpu_count()):
        database = f"uns_procs_{processes}"
        harness.create_database(database)
        server = harness.start_server(f"procs-{processes}", database, processes=str(processes))
        conn = await harness.sql(database)
        try:
            await wait_children_ready(server, processes)
            rows.append(await _level(server, conn, profile, tag, processes, harness))
        finally:
            await conn.close()
            await server.aclose()
            await harness.drop_database(database)
    return rows


async def _level(
    server: ServerChild,
    conn: asyncpg.Connection,
    profile: Profile,
    tag: str,
    processes: int,
    harness: Harness,
) -> Row:
    meter = CpuMeter(lambda: server.pid, harness.postmaster, tree=True)
    async with contextlib.AsyncExitStack() as stack:
        calls = []
        for p in range(PRODUCERS):
            chan = await stack.enter_async_context(
                client.channel(server.target, own_connection=True)
            )
            calls.append(sender(client.stub(chan), TYPE_ACCEPT, f"{tag}-procs{processes}-{p}"))
        turn = iter(range(1 << 62))

        async def call(n: int) -> None:
            # Round robin over the connections: every producer's calls go out on each.
            await calls[next(turn) % PRODUCERS](n)

        await conn.execute("ANALYZE uns_notifications")  # as the accept workload does
        load_start = os.getloadavg()[0]
        row = await closed_level(
            call,
            group="uns",
            name="processes",
            concurrency=PRODUCERS,
            seconds=profile.seconds,
            warmup_seconds=profile.warmup_seconds,
            max_ops=profile.max_ops,
            meter=meter,
        )
        load_end = os.getloadavg()[0]
    left, waited = await wait_backlog(conn, 60.0)
    row.setting = f"n={processes} c={PRODUCERS}"
    row.extra.update(
        processes=processes,
        load_average_start=load_start,
        load_average_end=load_end,
        cpu_count=os.cpu_count(),
        backlog_drain_seconds=round(waited, 2),
        backlog_left=left,
    )
    row.note = (f"load {load_start:.1f} -> {load_end:.1f}; " + row.note).rstrip("; ")
    return row
