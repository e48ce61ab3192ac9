"""The peer queue, procrastinate, in its own process (its CPU is measured like a server's).

``python -m bench.baselines.peer_child DSN JOBS CONCURRENCY WORKER_CONCURRENCY CAP``:
apply procrastinate's schema, defer JOBS no-op jobs from CONCURRENCY tasks (timing
each defer), then run one worker until the queue is empty. Prints a JSON line at each phase
boundary (so the parent can read CPU per phase) and one with the results.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import time

import procrastinate

QUEUE = "bench"


async def main(dsn: str, jobs: int, concurrency: int, worker_concurrency: int, cap: float) -> None:
    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(conninfo=dsn, min_size=2, max_size=concurrency + 4)
    )

    @app.task(name="bench.noop", queue=QUEUE)
    async def noop(n: int) -> None:
        return None

    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        latencies: list[float] = []
        counter = itertools.count()

        async def producer() -> None:
            while (n := next(counter)) < jobs:
                t0 = time.perf_counter()
                await noop.defer_async(n=n)
                latencies.append((time.perf_counter() - t0) * 1000)

        print(json.dumps({"phase": "defer"}), flush=True)
        started = time.perf_counter()
        await asyncio.gather(*(producer() for _ in range(concurrency)))
        defer_seconds = time.perf_counter() - started
        # Processing starts from analyzed statistics, as UNS's accept levels do. Planned
        # while the jobs table looked empty, procrastinate's fetch query cost 6.7-7.5 ms of
        # PostgreSQL CPU per job in some runs (1.6-2.0 ms in others) until autovacuum's
        # ANALYZE came round.
        async with app.connector.pool.connection() as conn:  # type: ignore[attr-defined]
            await conn.execute("ANALYZE")

        print(json.dumps({"phase": "process"}), flush=True)
        started = time.perf_counter()
        worker = asyncio.create_task(
            app.run_worker_async(
                queues=[QUEUE],
                wait=False,
                concurrency=worker_concurrency,
                install_signal_handlers=False,
            )
        )
        try:
            await asyncio.wait_for(asyncio.shield(worker), cap)
        except TimeoutError:
            worker.cancel()
        process_seconds = time.perf_counter() - started
        print(json.dumps({"phase": "done"}), flush=True)
        async with app.connector.pool.connection() as conn:  # type: ignore[attr-defined]
            cursor = await conn.execute(
                "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
            )
            row = await cursor.fetchone()
        processed = int(row[0]) if row else 0
    print(
        json.dumps(
            {
                "deferred": len(latencies),
                "defer_seconds": defer_seconds,
                "defer_latencies_ms": latencies,
                "processed": processed,
                "process_seconds": process_seconds,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    dsn, jobs, conc, wconc, cap = sys.argv[1:6]
    asyncio.run(main(dsn, int(jobs), int(conc), int(wconc), float(cap)))
