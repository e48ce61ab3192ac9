"""batch: BatchSendNotifications beside pgbench and River (issue 33 item 5).

One database, three servers in turn:

1. capture: with ``log_statement = 'all'``, a one-item batch (after a warm-up one)
   gives the transaction UNS commits for a batch; its write statement, grown to the
   batch size (``capture.batch_insert_script``), is what pgbench replays.
2. accept: ``batch_producers`` closed-loop producers send batches of ``batch_size``
   (log channel) until ``batch_items`` are accepted or the cap, dispatch off, so the
   window holds intake work only. The requests are built before the window.
3. drain: a server with dispatch on (default settings) delivers that backlog on the
   log channel; the time from spawn until no notification is PENDING.

Then, with no uns-server alive, pgbench runs the batch insert at the same producer
count, and (``river_rows``, a phase of its own) River inserts (``InsertMany``) and
works as many no-op jobs as were accepted.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from bench import capture, client, profiling
from bench.baselines import pgbench, river
from bench.config import Profile
from bench.cpu import CpuMeter
from bench.harness import TYPE_ACCEPT, Harness
from bench.stats import Row
from bench.workloads.common import pending
from uns.v1 import notification_service_pb2 as pb

DATABASE = "uns_batch"
PGBENCH_DATABASE = "pgb_batch"
POLL_SECONDS = 0.1
ANY_PENDING = "SELECT EXISTS (SELECT 1 FROM uns_notifications WHERE status = 'PENDING')"
Hotspots = dict[str, dict[str, list[tuple[str, float]]]]  # row -> profiling.summarize


def requests(tag: str, size: int, items: int) -> list[pb.BatchSendNotificationsRequest]:
    """``items`` realistic requests with fresh keys, ``size`` to a batch."""
    template = client.send_request(TYPE_ACCEPT, "template")
    out = []
    for first in range(0, items, size):
        batch = pb.BatchSendNotificationsRequest()
        for n in range(first, min(first + size, items)):
            item = batch.requests.add()
            item.CopyFrom(template)
            item.idempotency_key = item.correlation_id = f"{tag}-{n}"
        out.append(batch)
    return out


async def capture_batch(harness: Harness, tag: str) -> list[capture.Statement]:
    """The transaction of a one-item batch, from PostgreSQL's statement log."""
    conn = await harness.sql(DATABASE)
    try:
        await conn.execute(f"ALTER DATABASE {DATABASE} SET log_statement = 'all'")
        offset = harness.pg.log.stat().st_size if harness.pg.log.exists() else 0
        server = harness.start_server("batch-capture", DATABASE, dispatch_enabled="false")
        try:
            await server.wait_serving()
            async with client.channel(server.target) as chan:
                # The first batch on a connection runs asyncpg's type introspection.
                for name in ("warmup", "template"):
                    reply = await client.stub(chan).BatchSendNotifications(
                        requests(f"{tag}-capture-{name}", 1, 1)[0],
                        metadata=client.METADATA,
                        timeout=client.CALL_TIMEOUT_SECONDS,
                    )
                    if reply.results[0].WhichOneof("result") != "response":
                        raise RuntimeError(f"capture batch refused: {reply.results[0]}")
        finally:
            await server.aclose()
        await conn.execute(f"ALTER DATABASE {DATABASE} RESET log_statement")
    finally:
        await conn.close()
    with harness.pg.log.open("rb") as fh:
        fh.seek(offset)
        log = fh.read().decode(errors="replace")
    (harness.run_dir / "batch-statements.log").write_text(log)
    return capture.accept_transaction(log)


async def accept(harness: Harness, profile: Profile, tag: str, hotspots: Hotspots | None) -> Row:
    """Closed-loop producers until every prepared batch is sent or the cap."""
    batches = requests(f"{tag}-batch", profile.batch_size, profile.batch_items)
    server = harness.start_server("batch-accept", DATABASE, dispatch_enabled="false")
    sampler: profiling.Sampler | None = None
    try:
        await server.wait_serving()
        meter = CpuMeter(lambda: server.pid, harness.postmaster)
        async with client.channel(server.target) as chan:
            stub = client.stub(chan)
            # One warm-up batch (not counted): connections, plans, the first codecs.
            await stub.BatchSendNotifications(
                requests(f"{tag}-warm", profile.batch_size, profile.batch_size)[0],
                metadata=client.METADATA, timeout=client.CALL_TIMEOUT_SECONDS,
            )  # fmt: skip
            queue = iter(batches)
            accepted, refused, latencies = 0, 0, []
            first_error = ""
            started = time.perf_counter()
            deadline = started + profile.batch_cap_seconds

            async def producer() -> None:
                nonlocal accepted, refused, first_error
                for batch in queue:
                    if time.perf_counter() > deadline:
                        return
                    t0 = time.perf_counter()
                    reply = await stub.BatchSendNotifications(
                        batch, metadata=client.METADATA, timeout=client.CALL_TIMEOUT_SECONDS
                    )
                    latencies.append((time.perf_counter() - t0) * 1000)
                    for result in reply.results:
                        if result.WhichOneof("result") == "response":
                            accepted += 1
                        else:
                            refused += 1
                            first_error = first_error or str(result.error.message)[:300]

            if hotspots is not None:
                sampler = profiling.Sampler(server.pid, harness.run_dir, "batch-accept")
            meter.start()
            await asyncio.gather(*(producer() for _ in range(profile.batch_producers)))
            seconds = time.perf_counter() - started
            window = meter.stop()
    finally:
        if sampler is not None:
            sampler.stop()
            hotspots["batch accept"] = profiling.summarize(sampler.raw)
        await server.aclose()
    note = f"{refused} refused ({first_error})" if refused else "latency per batch call"
    if accepted < profile.batch_items:
        note += f"; cap hit: {accepted}/{profile.batch_items}"
    return Row(
        group="uns",
        name="batch accept",
        setting=f"b={profile.batch_size} c={profile.batch_producers}",
        ops=accepted,
        seconds=seconds,
        latencies_ms=latencies,
        server_cpu_s=window.server,
        db_cpu_s=window.db,
        client_cpu_s=window.client,
        note=note,
        extra={"refused": refused, "batch_size": profile.batch_size},
    )


async def drain(harness: Harness, profile: Profile, hotspots: Hotspots | None) -> Row:
    """The accepted backlog delivered on the log channel by a fresh server."""
    conn = await harness.sql(DATABASE)
    sampler: profiling.Sampler | None = None
    try:
        backlog = await pending(conn)
        spawned = time.perf_counter()
        server = harness.start_server("batch-drain", DATABASE)
        pid = server.pid
        meter = CpuMeter(lambda: pid, harness.postmaster)
        meter.start()
        try:
            serving = await server.wait_serving()
            if hotspots is not None:
                sampler = profiling.Sampler(pid, harness.run_dir, "batch-drain")
            # EXISTS, not a count: polling must not add PostgreSQL work to the window.
            deadline = spawned + profile.batch_drain_cap_seconds
            while time.perf_counter() < deadline:
                if not await conn.fetchval(ANY_PENDING):
                    break
                await asyncio.sleep(POLL_SECONDS)
            elapsed = time.perf_counter() - spawned
            window = meter.stop()
            left = await pending(conn)
            states = dict(
                await conn.fetch("SELECT status, count(*) FROM uns_notifications GROUP BY status")
            )
        finally:
            if sampler is not None:
                sampler.stop()
                hotspots["batch drain"] = profiling.summarize(sampler.raw)
            await server.aclose()
    finally:
        await conn.close()
    delivered = backlog - left
    rate = delivered / elapsed if elapsed > 0 else 0.0
    note = f"log channel; 100k in ~{100_000 / rate:.0f} s" if rate else "log channel"
    if left:
        note += f"; cap hit: {left} left"
    return Row(
        group="uns",
        name="batch drain",
        setting=f"n={backlog}",
        ops=delivered,
        seconds=elapsed,
        server_cpu_s=window.server,
        db_cpu_s=window.db,
        client_cpu_s=window.client,
        note=note,
        extra={
            "backlog": backlog,
            "serving_seconds": round(serving, 2),
            "states_after": {str(k): int(v) for k, v in states.items()},
        },
    )


async def pgbench_rows(
    harness: Harness, profile: Profile, tx: list[capture.Statement], run_dir: Path
) -> Row:
    """pgbench replaying the batch insert, ``batch_producers`` clients; rates in rows."""
    harness.create_database(PGBENCH_DATABASE)
    try:
        row = await pgbench.run(
            harness.pg.pgbench_path(),
            port=harness.pg.port,
            database=PGBENCH_DATABASE,
            script=capture.batch_insert_script(tx, profile.batch_size),
            label="batch-insert",
            clients=profile.batch_producers,
            seconds=max(profile.seconds, 2.0),
            work_dir=run_dir,
            meter=CpuMeter(lambda: None, harness.postmaster),
        )
        await harness.check_replay_wrote(PGBENCH_DATABASE, row.ops)
    finally:
        await harness.drop_database(PGBENCH_DATABASE)
    size = profile.batch_size
    row.setting = f"b={size} c={profile.batch_producers}"
    row.ops *= size  # rows, as the UNS row counts notifications
    row.rate_override = row.rate_override * size if row.rate_override else None
    row.note = "; ".join(n for n in (row.note, "latency per batch transaction") if n)
    return row


async def run(
    harness: Harness, profile: Profile, tag: str, hotspots: Hotspots | None = None
) -> tuple[list[Row], dict[str, str]]:
    """The UNS batch rows and the pgbench one; the meta notes hold the captured SQL.
    With ``hotspots`` (``--profile``), py-spy samples the accept and drain servers and
    their summaries are put there."""
    rows: list[Row] = []
    notes: dict[str, str] = {}
    harness.create_database(DATABASE)
    try:
        tx = await capture_batch(harness, tag)
        notes["batch_transaction_sql"] = "\n".join(s.sql for s in tx)
        rows.append(await accept(harness, profile, tag, hotspots))
        rows.append(await drain(harness, profile, hotspots))
    finally:
        await harness.drop_database(DATABASE)
    rows.append(await pgbench_rows(harness, profile, tx, harness.run_dir))
    return rows, notes


async def river_rows(harness: Harness, profile: Profile, jobs: int) -> list[Row]:
    """River inserting ``jobs`` no-op jobs in batches of the same size from as many
    producers, then working them (raises when ``go`` is missing: ``river.available``)."""
    binary = await river.build(harness.run_dir)
    return await river.run(
        harness,
        binary,
        jobs=max(jobs, profile.batch_size),
        batch=profile.batch_size,
        producers=profile.batch_producers,
        cap_seconds=profile.batch_drain_cap_seconds,
    )
