"""The batch workload at token size: a real PostgreSQL, real uns-servers, pgbench replaying
the captured batch insert and the River harness built with go (no timings asserted)."""

from __future__ import annotations

from pathlib import Path

from bench import capture, config, report
from bench.baselines import river
from bench.harness import Harness
from bench.stats import Row
from bench.workloads import batch
from tests.toolchain.tools import skip_or_fail

SMOKE = config.SMOKE


async def test_batch_rows_and_their_baselines(tmp_path: Path) -> None:
    harness = Harness(tmp_path)
    try:
        harness.write_channels("http://127.0.0.1:9/unused")  # the batch type logs
        rows, notes = await batch.run(harness, SMOKE, "smoke")
        if river.available():
            rows += await batch.river_rows(harness, SMOKE, SMOKE.batch_items)
    finally:
        harness.close()
    by_name = {r.name: r for r in rows}
    accept = by_name["batch accept"]
    assert (accept.ops, accept.extra["refused"]) == (SMOKE.batch_items, 0), accept.note
    assert len(accept.latencies_ms) == SMOKE.batch_items // SMOKE.batch_size
    drain = by_name["batch drain"]
    # Every accepted notification (and the two capture batches' and the warm-up's) left
    # PENDING for a delivery on the log channel.
    assert drain.ops == drain.extra["backlog"] == SMOKE.batch_items + 2 + SMOKE.batch_size
    assert "PENDING" not in drain.extra["states_after"], drain.extra
    insert = by_name["pgbench batch-insert"]
    assert insert.ops > 0 and insert.ops % SMOKE.batch_size == 0, insert.note
    assert "failed" not in insert.note
    assert "INSERT INTO uns_notifications" in notes["batch_transaction_sql"]
    text = report.render(report.Results(rows), 2)
    assert "batch accept / pgbench batch-insert" in text
    assert "CPU budget of the batch rows" in text
    if not river.available():
        skip_or_fail("go not found: the River rows were not measured")
    inserted, worked = by_name["river InsertMany"], by_name["river work"]
    assert inserted.ops == SMOKE.batch_items
    assert worked.ops == SMOKE.batch_items, worked.note
    assert inserted.extra["river"].startswith("v")
    assert "InsertMany" in report.ratios(report.Results(rows))[accept.key]


def test_batch_insert_script_grows_each_array_to_the_batch() -> None:
    uuid = "f8ff7e61-2fcc-4cd6-b43b-4a23ea04dbcc"
    key = "a" * 64
    tx = [
        capture.Statement("BEGIN"),
        capture.Statement("SELECT id FROM uns_notifications WHERE key = ANY($1)", {1: "'{x}'"}),
        capture.Statement(
            "WITH r0 AS (INSERT INTO uns_notifications (id, key, n) SELECT * FROM "
            "unnest($2::VARCHAR(36)[], $3::VARCHAR(64)[], $4::INTEGER[]) RETURNING 1), "
            "gate AS (SELECT pg_advisory_xact_lock($1)) INSERT INTO uns_events "
            "(notification_id, at, payload) SELECT e.n, $6::timestamptz, e.p::jsonb "
            "FROM unnest($2::text[], $5::text[]) AS e(n, p) WHERE (SELECT true FROM gate)",
            {
                1: "'42'",
                2: f"'{{{uuid}}}'",
                3: f"'{{{key}}}'",
                4: "'{7}'",
                5: '\'{"{\\"a\\": null}"}\'',
                6: "'2026-12-06 05:17:24.390047+00'",
            },
        ),
        capture.Statement("COMMIT"),
    ]
    script = capture.batch_insert_script(tx, 500)
    lines = script.splitlines()
    assert lines[:2] == [f"\\set v{i} random(1, {capture.RANDOM_MAX})" for i in (1, 2)]
    assert lines[2] == "BEGIN;" and lines[-1] == "COMMIT;" and len(lines) == 5  # no reads
    assert "generate_series(1, 500) g" in script
    assert script.count("md5(:v1::text || '.' || g)::uuid::text") == 2  # $2 twice: one id
    assert "md5(:v2::text || '.' || g) || md5('k' || :v2::text || '.' || g)" in script
    assert "pg_advisory_xact_lock(('42'))" in script  # a scalar stays one value
    assert "(now())::timestamptz" in script
    assert "E'{\"a\"\\x3a null}'" in script  # a ':' hidden from pgbench


def _row(name: str, setting: str, ops: int, seconds: float) -> Row:
    return Row(group="uns", name=name, setting=setting, ops=ops, seconds=seconds,
               server_cpu_s=ops / 4000, db_cpu_s=ops / 8000, client_cpu_s=ops / 20000)  # fmt: skip


def test_batch_targets_are_ratios_of_the_same_setting() -> None:
    res = report.Results([
        _row("batch accept", "b=500 c=4", 30_000, 10.0),
        _row("pgbench batch-insert", "b=500 c=4", 40_000, 2.0),
        _row("river InsertMany", "b=500 c=4", 30_000, 1.0),
        _row("batch drain", "n=30000", 30_000, 15.0),
        _row("river work", "n=30000", 30_000, 3.0),
    ])  # fmt: skip
    targets = {t.name: t for t in report.batch_targets(res)}
    assert targets["batch accept / pgbench batch-insert"].value == 3_000 / 20_000
    assert targets["batch accept / River InsertMany"].value == 0.1
    assert targets["batch accept, notifications/s"].met is False
    assert targets["batch drain (log channel), delivered/s"].value == 2_000
    assert report.ratios(res)["batch drain n=30000"] == "0.20x river-work"
    bound = report.batch_bound(res, 2)
    assert "at most 4,706/s here (0.47x the goal" in bound[1]
    assert "one uns-server process (one core for its Python): at most 4,000/s" in bound[2]
