"""Bulk history straight into PostgreSQL: clone one real notification (and its events).

The template row is made by the server itself, so every column, JSON document and
event payload has the shape the code writes today; the clone statement reads the
column list from the catalog and overrides only what must differ per row (ids, keys,
correlation id, times). ``INSERT ... SELECT generate_series`` in chunks: a million
rows take seconds, not the hours the API would.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

import asyncpg

CHUNK_ROWS = 100_000


async def _columns(conn: asyncpg.Connection, table: str) -> list[str]:
    rows = await conn.fetch(
        "SELECT column_name FROM information_schema.columns "
        "WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position",
        table,
    )
    return [r["column_name"] for r in rows]


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _id(seed: str, suffix: str = "") -> str:
    """A deterministic UUID text per (seed, g): the events find their notification."""
    return f"md5('{seed}' || g::text || '{suffix}')::uuid::text"


async def clone(
    dsn: str,
    template_id: str,
    count: int,
    *,
    seed: str,
    correlation_prefix: str,
    spread_seconds: float = 0.0,
    overrides: Mapping[str, str] | None = None,
    analyze: bool = True,
) -> float:
    """Insert ``count`` copies of notification ``template_id`` and its events.

    With ``spread_seconds``, copy ``g`` is backdated by ``g * spread / count`` seconds
    (history, not new work); the oldest copies are inserted first, so event sequences
    grow with time as they do in a live database. ``overrides`` maps notification
    columns to SQL expressions over the template row, ``g`` and ``{shift}`` (the copy's
    backdating interval). Notifications and events are inserted on two connections at
    once, chunk by chunk. Returns the seconds it took.
    """
    started = time.monotonic()
    conn = await asyncpg.connect(dsn)
    try:
        n_cols = await _columns(conn, "uns_notifications")
        e_cols = [c for c in await _columns(conn, "uns_events") if c != "sequence"]
    finally:
        await conn.close()
    shift = f"(g * {spread_seconds / max(count, 1):.9f}) * interval '1 second'"
    time_columns = {"created_at", "updated_at", "next_attempt", "delivered_at", "at"}
    n_over = {
        "id": _id(seed),
        "key": f"md5('{seed}k' || g::text) || md5('{seed}K' || g::text)",
        "notification": (
            "jsonb_set(jsonb_set(notification, '{correlation_id}', "
            f"to_jsonb('{correlation_prefix}' || g::text)), "
            f"'{{idempotency_key}}', to_jsonb('{seed}' || g::text))"
        ),
    }
    for column, expression in (overrides or {}).items():
        n_over[column] = expression.replace("{shift}", f"({shift})")
    e_over = {"id": _id(seed, ":' || e.id || '"), "notification_id": _id(seed)}
    for column in time_columns:
        if spread_seconds:
            n_over.setdefault(column, f"{_ident(column)} - {shift}")
            e_over.setdefault(column, f"e.{_ident(column)} - {shift}")
    n_select = ", ".join(n_over.get(c, _ident(c)) for c in n_cols)
    e_select = ", ".join(e_over.get(c, f"e.{_ident(c)}") for c in e_cols)
    n_sql = (
        f"INSERT INTO uns_notifications ({', '.join(map(_ident, n_cols))}) "
        f"SELECT {n_select} FROM uns_notifications, generate_series($2::int, $3::int) g "
        "WHERE id = $1 ORDER BY g DESC"
    )
    e_sql = (
        f"INSERT INTO uns_events ({', '.join(map(_ident, e_cols))}) "
        f"SELECT {e_select} FROM generate_series($2::int, $3::int) g, "
        "(SELECT * FROM uns_events WHERE notification_id = $1 ORDER BY sequence) e "
        "ORDER BY g DESC, e.sequence"
    )

    async def fill(sql: str) -> None:
        worker = await asyncpg.connect(dsn)
        try:
            await worker.execute("SET synchronous_commit = off")
            for high in range(count, 0, -CHUNK_ROWS):  # oldest first
                low = max(1, high - CHUNK_ROWS + 1)
                await worker.execute(sql, template_id, low, high)
        finally:
            await worker.close()

    await asyncio.gather(fill(n_sql), fill(e_sql))
    if analyze:
        await vacuum_analyze(dsn)
    return time.monotonic() - started


async def vacuum_analyze(dsn: str) -> None:
    """Fresh statistics and visibility maps, as autovacuum leaves a settled table."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("VACUUM ANALYZE uns_notifications")
        await conn.execute("VACUUM ANALYZE uns_events")
    finally:
        await conn.close()
