"""Checks of the benchmark's own logic (no servers, no timings asserted); part of the
main suite (testpaths)."""

from __future__ import annotations

from bench import capture, report
from bench.stats import Row, percentile

LOG = """\
2026-11-29 07:39:43.224 UTC [11965] LOG:  statement: BEGIN;
2026-11-29 07:39:43.225 UTC [11965] LOG:  execute __asyncpg_stmt_e__: SELECT id
	FROM uns_notifications
\tWHERE uns_notifications.key = $1::VARCHAR
2026-11-29 07:39:43.225 UTC [11965] DETAIL:  Parameters: $1 = '{key}'
2026-11-29 07:39:43.226 UTC [11999] LOG:  statement: BEGIN;
2026-11-29 07:39:43.231 UTC [11965] LOG:  execute __asyncpg_stmt_10__: INSERT INTO \
uns_notifications (id, key, notification, next_attempt, dedup_key) \
VALUES ($1::VARCHAR, $2::VARCHAR, $3::JSONB, \
$4::TIMESTAMP WITH TIME ZONE, $5::VARCHAR)
2026-11-29 07:39:43.231 UTC [11965] DETAIL:  Parameters: $1 = '{uuid}', $2 = '{key}', \
$3 = '{{"message": "it''s 92%; ok", "n": 1}}', $4 = '2026-11-29 07:39:43.222182+00', $5 = NULL
2026-11-29 07:39:43.232 UTC [11965] LOG:  execute __asyncpg_stmt_11__: INSERT INTO uns_events \
(id, notification_id) VALUES ($1::VARCHAR, $2::VARCHAR) RETURNING uns_events.sequence
2026-11-29 07:39:43.232 UTC [11965] DETAIL:  Parameters: $1 = '{uuid2}', $2 = '{uuid}'
2026-11-29 07:39:43.233 UTC [11965] LOG:  statement: COMMIT;
""".format(
    key="a" * 64,
    uuid="f8ff7e61-2fcc-4cd6-b43b-4a23ea04dbcc",
    uuid2="7cbc32d3-68c5-4aaf-bfa0-14370240e232",
)


def test_parameters_keep_sql_quoting() -> None:
    params = capture.parse_parameters("$1 = 'it''s', $2 = NULL, $10 = 'a, $3 = b'")
    assert params == {1: "'it''s'", 2: "NULL", 10: "'a, $3 = b'"}


def test_accept_transaction_is_found_per_backend() -> None:
    tx = capture.accept_transaction(LOG)
    assert [s.sql.split()[0] for s in tx] == ["BEGIN", "SELECT", "INSERT", "INSERT", "COMMIT"]
    assert tx[1].sql.endswith("$1::VARCHAR")  # continuation line joined


def test_accept_transaction_is_found_when_its_row_rides_in_the_events_append() -> None:
    ridden = (
        "2026-11-29 07:39:43.231 UTC [11965] LOG:  execute __asyncpg_stmt_10__: "
        "WITH r0 AS (INSERT INTO uns_notifications (id) SELECT r.id "
        "FROM unnest($3::VARCHAR[]) AS r(id) RETURNING 1) INSERT INTO uns_events (id) "
        "SELECT e.id FROM unnest($2::text[]) AS e(id)"
    )
    log = "\n".join(
        ridden if "INSERT INTO uns_notifications" in line else line
        for line in LOG.splitlines()
        if not line.startswith(("uns_notifications", "VALUES", "$4", "$3 ="))
    )
    tx = capture.accept_transaction(log)
    assert [s.sql.split()[0] for s in tx] == ["BEGIN", "SELECT", "WITH", "INSERT", "COMMIT"]


def test_pgbench_script_uses_fresh_ids_consistently() -> None:
    script = capture.pgbench_script(capture.accept_transaction(LOG))
    lines = script.splitlines()
    assert lines[0].startswith("\\set v1 random(1, ")
    # the key (v1) and the notification id (v2) are fresh per transaction ...
    assert "md5(:v1::text) || md5('k' || :v1::text)" in script
    # ... and the id reused by the event row stays the same variable
    assert script.count("md5(:v2::text)::uuid::text") == 2
    assert "(now())::TIMESTAMP WITH TIME ZONE" in script
    assert '\'{"message": "it\'\'s 92%; ok", "n": 1}\'' in script
    assert "(NULL)::VARCHAR" in script
    assert "random()" not in script.replace("random(1, ", "")  # no volatile WHERE values
    assert script.rstrip().endswith("COMMIT;")


def test_percentile_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile([], 50) is None


def test_table_and_targets_render_with_partial_results() -> None:
    rows = [
        Row("uns", "accept", "c=16", ops=100, seconds=1.0, latencies_ms=[1.0, 2.0]),
        Row("baseline", "grpc echo", "c=16", ops=400, seconds=1.0, latencies_ms=[0.5]),
    ]
    results = report.Results(rows)
    text = report.render(results)
    assert "0.25x echo" in text
    met = {t.name: t.met for t in report.targets(results)}
    assert met["accept c=16 / grpc echo c=16"] is False
    assert met["accept c=16 / pgbench accept-tx c=16"] is None
    assert report.to_json(results, {})["rows"][0]["p50_ms"] == 1.0


def test_cpu_budget_bounds_accept_by_all_the_cpu_it_needs() -> None:
    # accept: 4 ms of CPU per call over server, PostgreSQL and load generator; echo: 1 ms.
    rows = [
        Row("uns", "accept", "c=16", ops=1000, seconds=4.0, latencies_ms=[1.0],
            server_cpu_s=2.5, db_cpu_s=1.0, client_cpu_s=0.5),
        Row("baseline", "grpc echo", "c=16", ops=2000, seconds=1.0, latencies_ms=[1.0],
            server_cpu_s=1.2, client_cpu_s=0.8),
    ]  # fmt: skip
    lines = report.cpu_budget(report.Results(rows), cores=2)
    assert "accept 4.00 ms of CPU per call, grpc echo 1.00 ms" in lines[1]
    assert "accept kept 1.00 of 2 cores busy" in lines[1]
    assert "at most 500 accepts/s on 2 cores: 0.25x echo" in lines[2]
    assert report.cpu_budget(report.Results(rows[:1]), cores=2) == []


def test_watch_bound_is_the_largest_level_times_the_slower_side() -> None:
    # 1,000 subscribers x 10 events: server 0.11 ms per copy, load generator 0.05 ms.
    rows = [
        Row("uns", "watch", "subs=100", ops=1000, seconds=1.0, latencies_ms=[1.0],
            server_cpu_s=1.0, client_cpu_s=1.0),
        Row("uns", "watch", "subs=1000", ops=10_000, seconds=1.0, latencies_ms=[1.0],
            server_cpu_s=1.1, client_cpu_s=0.5),
    ]  # fmt: skip
    lines = report.watch_bound(report.Results(rows))
    assert lines[0].startswith("Fan-out floor at 1,000 watch subscribers")
    assert "server 0.110 ms of CPU per copy, load generator 0.050 ms" in lines[1]
    assert "arrives >= 110 ms after its commit" in lines[1]
    assert report.watch_bound(report.Results([])) == []
