"""drain: a backlog of pending notifications, then the time to deliver them all.

Phase A runs uns-server with dispatch disabled on a database that logs every
statement: two real SendNotifications (a warm-up, then the template row) give, as a
by-product, the captured accept transaction for the pgbench baseline. The backlog is cloned from
that row in SQL. Phase B restarts the server with dispatch on and default worker
settings, and we count webhook arrivals at the receiver until all are in (or the cap).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from bench import capture, client, sqlgen
from bench.config import Profile
from bench.cpu import CpuMeter
from bench.harness import TYPE_DELIVER, Harness
from bench.receiver import WebhookReceiver
from bench.stats import Row

DATABASE = "uns_drain"
PREFIX = "drain-"


@dataclass
class DrainOutcome:
    row: Row | None  # None when only the capture was wanted
    accept_sql: list[capture.Statement]


async def run(
    harness: Harness, receiver: WebhookReceiver, profile: Profile, *, measure: bool = True
) -> DrainOutcome:
    dsn = harness.create_database(DATABASE)
    conn = await harness.sql(DATABASE)
    try:
        await conn.execute(f"ALTER DATABASE {DATABASE} SET log_statement = 'all'")
        log_offset = harness.pg.log.stat().st_size if harness.pg.log.exists() else 0
        server = harness.start_server("drain-a", DATABASE, dispatch_enabled="false")
        await server.wait_serving()
        async with client.channel(server.target) as chan:
            # The first accept on a connection also runs asyncpg's one-time type
            # introspection: the second is the steady state the capture takes.
            for key, correlation in (("drain-warmup", "warmup"), ("drain-template", "0")):
                reply = await client.stub(chan).SendNotification(
                    client.send_request(TYPE_DELIVER, key, correlation=PREFIX + correlation),
                    metadata=client.METADATA,
                    timeout=client.CALL_TIMEOUT_SECONDS,
                )
        await server.aclose()
        await conn.execute(f"ALTER DATABASE {DATABASE} RESET log_statement")
        with harness.pg.log.open("rb") as fh:
            fh.seek(log_offset)
            log = fh.read().decode(errors="replace")
        (harness.run_dir / "drain-statements.log").write_text(log)  # what the capture read
        accept_sql = capture.accept_transaction(log)
        if not measure:
            return DrainOutcome(None, accept_sql)

        backlog = profile.drain_backlog
        fill_seconds = await sqlgen.clone(
            dsn, reply.notification_id, backlog - 2, seed="drain", correlation_prefix=PREFIX
        )
        pending = int(await conn.fetchval("SELECT count(*) FROM uns_notifications"))

        spawned = time.perf_counter()
        server_b = harness.start_server("drain-b", DATABASE)
        pid = server_b.pid
        meter = CpuMeter(lambda: pid, harness.postmaster)
        opened = receiver.connections
        meter.start()
        serving_seconds = await server_b.wait_serving()
        delivered = await receiver.wait_for(PREFIX, pending, profile.drain_cap_seconds)
        window = meter.stop()
        connections = receiver.connections - opened
        arrivals = [t for k, t in receiver.arrivals.items() if k.startswith(PREFIX)]
        elapsed = (max(arrivals) if arrivals else time.perf_counter()) - spawned
        states = dict(
            await conn.fetch("SELECT status, count(*) FROM uns_notifications GROUP BY status")
        )
        await server_b.aclose()
    finally:
        await conn.close()
        await harness.drop_database(DATABASE)
    rate = delivered / elapsed if elapsed > 0 else 0.0
    notes = [f"100k in ~{100_000 / rate:.0f} s" if rate else ""]
    if delivered < pending:
        notes.append(f"cap hit: {delivered}/{pending} delivered")
    note = "; ".join(n for n in notes if n)
    row = Row(
        group="uns",
        name="drain",
        setting=f"n={pending}",
        ops=delivered,
        seconds=elapsed,
        server_cpu_s=window.server,
        db_cpu_s=window.db,
        client_cpu_s=window.client,
        note=note,
        extra={
            "backlog": pending,
            "fill_seconds": round(fill_seconds, 2),
            "serving_seconds": round(serving_seconds, 2),
            "states_after": {str(k): int(v) for k, v in states.items()},
            "projected_seconds_for_100k": round(100_000 / rate, 1) if rate else None,
            "connections_opened": connections,
        },
    )
    return DrainOutcome(row, accept_sql)
