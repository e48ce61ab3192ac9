"""growth: accept latency on an empty database vs one with a large history.

Two databases, two servers. The history database gets a few real notifications
(delivered through the log channel); one of them, with all its events, is cloned
``growth_history`` times in SQL (backdated over 30 days) and VACUUM ANALYZEd. Then
both servers run at once and one producer alternates between them in short rounds,
so a noisy neighbour on a shared 2-core machine hits both sides alike.
"""

from __future__ import annotations

from bench import client, sqlgen
from bench.config import Profile
from bench.cpu import CpuMeter
from bench.harness import TYPE_ACCEPT, Harness, ServerChild
from bench.stats import Row
from bench.workloads.common import sender, wait_backlog

EMPTY, HISTORY = "uns_growth_empty", "uns_growth_history"
HISTORY_SPREAD_SECONDS = 30 * 24 * 3600.0
CONCURRENCY = 1
ROUNDS = 6
SEED_NOTIFICATIONS = 20


async def _seed_template(harness: Harness, tag: str) -> tuple[str, int]:
    """Make real delivered notifications on the history database; pick the template."""
    server = harness.start_server("growth-seed", HISTORY)
    try:
        await server.wait_serving()
        async with client.channel(server.target) as chan:
            call = sender(client.stub(chan), TYPE_ACCEPT, f"{tag}-growth-seed")
            for n in range(SEED_NOTIFICATIONS):
                await call(n)
        conn = await harness.sql(HISTORY)
        try:
            await wait_backlog(conn, 30.0)
            row = await conn.fetchrow(
                "SELECT n.id, (SELECT count(*) FROM uns_events e WHERE e.notification_id = n.id)"
                " AS events FROM uns_notifications n WHERE n.status = 'DELIVERED'"
                " ORDER BY 2 DESC LIMIT 1"
            )
        finally:
            await conn.close()
    finally:
        await server.aclose()
    if row is None:
        raise RuntimeError("growth: no delivered notification to clone")
    return str(row["id"]), int(row["events"])


async def run(harness: Harness, profile: Profile, tag: str) -> list[Row]:
    harness.create_database(EMPTY)
    history_dsn = harness.create_database(HISTORY)
    template, events_per = await _seed_template(harness, tag)
    fill_seconds = await sqlgen.clone(
        history_dsn,
        template,
        profile.growth_history,
        seed="hist",
        correlation_prefix="hist-",
        spread_seconds=HISTORY_SPREAD_SECONDS,
    )
    servers: dict[str, ServerChild] = {}
    rows: dict[str, Row] = {}
    try:
        for database in (EMPTY, HISTORY):
            servers[database] = harness.start_server(f"growth-{database}", database)
        for server in servers.values():
            await server.wait_serving()
        channels = {db: client.channel(s.target) for db, s in servers.items()}
        calls = {
            db: sender(client.stub(chan), TYPE_ACCEPT, f"{tag}-{db}")
            for db, chan in channels.items()
        }
        meters = {db: _meter(s.pid, harness.postmaster) for db, s in servers.items()}
        for call in calls.values():  # same warm-up for both
            await client.closed_loop(
                call, concurrency=CONCURRENCY, seconds=max(1.0, profile.warmup_seconds),
                max_ops=profile.max_ops,
            )  # fmt: skip
        for db in calls:
            rows[db] = Row(group="uns", name="growth", setting="", ops=0, seconds=0.0)
            rows[db].server_cpu_s = rows[db].db_cpu_s = rows[db].client_cpu_s = 0.0
        for _ in range(ROUNDS):
            for db, call in calls.items():
                meters[db].start()
                result = await client.closed_loop(
                    call,
                    concurrency=CONCURRENCY,
                    seconds=profile.growth_seconds / ROUNDS,
                    max_ops=profile.max_ops,
                )
                window = meters[db].stop()
                row = rows[db]
                row.ops += result.ops
                row.seconds += result.seconds
                row.latencies_ms += result.latencies_ms
                row.server_cpu_s = _add(row.server_cpu_s, window.server)
                row.db_cpu_s = _add(row.db_cpu_s, window.db)
                row.client_cpu_s = _add(row.client_cpu_s, window.client)
                if result.errors:
                    row.note = f"{result.errors} errors ({result.first_error})"
        for chan in channels.values():
            await chan.close()
    finally:
        for server in servers.values():
            await server.aclose()
        for database in (EMPTY, HISTORY):
            await harness.drop_database(database)
    rows[EMPTY].setting = f"history=0 c={CONCURRENCY}"
    rows[HISTORY].setting = f"history={_short(profile.growth_history)} c={CONCURRENCY}"
    rows[HISTORY].extra.update(
        history_notifications=profile.growth_history + SEED_NOTIFICATIONS,
        history_events=profile.growth_history * events_per,
        fill_seconds=round(fill_seconds, 1),
        rounds=ROUNDS,
    )
    return [rows[EMPTY], rows[HISTORY]]


def _meter(pid: int, postmaster: int | None) -> CpuMeter:
    return CpuMeter(lambda: pid, postmaster)


def _add(total: float | None, value: float | None) -> float | None:
    return None if total is None or value is None else total + value


def _short(n: int) -> str:
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    if n >= 1000 and n % 1000 == 0:
        return f"{n // 1000}k"
    return str(n)
