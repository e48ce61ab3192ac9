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


def test_accept_transaction_is_one_statement_sent_outside_a_transaction_block() -> None:
    lone = (
        "2026-11-29 07:39:44.100 UTC [11965] LOG:  execute __asyncpg_stmt_12__: "
        "WITH r0 AS (INSERT INTO uns_notifications (id) SELECT r.id "
        "FROM unnest($3::VARCHAR[]) AS r(id) RETURNING 1) INSERT INTO uns_events (id) "
        "SELECT e.id FROM unnest($2::text[]) AS e(id)\n"
        "2026-11-29 07:39:44.100 UTC [11965] DETAIL:  Parameters: "
        "$2 = '{7cbc32d3-68c5-4aaf-bfa0-14370240e232}', "
        "$3 = '{f8ff7e61-2fcc-4cd6-b43b-4a23ea04dbcc}'"
    )
    tx = capture.accept_transaction(LOG + lone + "\n")
    assert [s.sql.split()[0] for s in tx] == ["WITH"]  # the later one, alone
    assert capture.batch_insert_script(tx, 2).count(";") == 1


def test_the_guard_reads_the_replaying_databases_own_policy() -> None:
    policy = "0b4c2a8e-5b1e-4a57-9d7e-3f5a1c2b9e10"
    guarded = (
        "2026-11-29 07:39:44.100 UTC [11965] LOG:  execute __asyncpg_stmt_12__: "
        "WITH r0 AS (INSERT INTO uns_notifications (id, notification_type) "
        "SELECT r.id, r.notification_type "
        "FROM unnest($3::VARCHAR(36)[], $4::VARCHAR(255)[]) AS r(id, notification_type) "
        "WHERE NOT EXISTS (SELECT 1 FROM (SELECT DISTINCT * FROM "
        "unnest($4::VARCHAR(255)[], $5::text[])) "
        "AS w(notification_type, policy) WHERE w.policy <> '') RETURNING 1) "
        "INSERT INTO uns_events (id) SELECT e.id FROM unnest($2::text[]) AS e(id)\n"
        "2026-11-29 07:39:44.100 UTC [11965] DETAIL:  Parameters: "
        "$2 = '{7cbc32d3-68c5-4aaf-bfa0-14370240e232}', "
        "$3 = '{f8ff7e61-2fcc-4cd6-b43b-4a23ea04dbcc}', "
        f"$4 = '{{bench.accept}}', $5 = '{{{policy}:1}}'"
    )
    tx = capture.accept_transaction(guarded + "\n")
    mine = "(SELECT p.id || ':' || p.active_revision FROM uns_policies AS p "
    mine += "WHERE p.notification_type = 'bench.accept')"
    for script in (capture.pgbench_script(tx), capture.batch_insert_script(tx, 3)):
        assert policy not in script
        assert mine in script


def test_pgbench_script_uses_fresh_ids_consistently() -> None:
    script = capture.pgbench_script(capture.accept_transaction(LOG))
    lines = script.splitlines()
    assert lines[0].startswith("\\set v1 random(1, ")
    # the key (v1) and the notification id (v2) are fresh per transaction ...
    assert "md5(:v1::text) || md5('k' || :v1::text)" in script
    # ... and the id reused by the event row stays the same variable
    assert script.count("md5(:v2::text)::uuid::text") == 2
    assert "(now())::TIMESTAMP WITH TIME ZONE" in script
    assert """E'{"message"\\x3a "it''s 92%; ok", "n"\\x3a 1}'""" in script  # a ':' is hidden
    assert "(NULL)::VARCHAR" in script
    assert "random()" not in script.replace("random(1, ", "")  # no volatile WHERE values
    assert script.rstrip().endswith("COMMIT;")


def _one_statement_accept(pid: int, at: str, nid: str, key: str, driver: bool) -> str:
    """An accept as the PostgreSQL log shows it since the notification row rides in the
    events append (``unnest`` of array parameters); ``driver``: with asyncpg's one-time
    type introspection, as on a connection's first use of these array types."""
    head = f"2026-12-02 12:41:{at} UTC [{pid}]"
    introspection = f"""\
{head} LOG:  execute __asyncpg_stmt_3__: SELECT
\tcurrent_setting('jit') AS cur,
\tset_config('jit', 'off', false) AS new
{head} LOG:  execute __asyncpg_stmt_4__: WITH RECURSIVE typeinfo_tree(
\toid, ns, name) AS (SELECT t.oid FROM pg_type t WHERE t.oid = any($1::oid[]))
\tSELECT * FROM typeinfo_tree
{head} DETAIL:  Parameters: $1 = '{{1015,1185}}'
{head} LOG:  execute __asyncpg_stmt_5__: SELECT
\tset_config('jit', $1, false)
{head} DETAIL:  Parameters: $1 = 'on'
"""
    return f"""\
{head} LOG:  statement: BEGIN;
{head} LOG:  execute __asyncpg_stmt_1__: SELECT uns_notifications.id
	FROM uns_notifications
	WHERE uns_notifications.key = ANY ($1)
{head} DETAIL:  Parameters: $1 = '{{{key}}}'
{head} LOG:  execute __asyncpg_stmt_2__: SELECT uns_policies.id FROM uns_policies \
WHERE uns_policies.notification_type = ANY ($1)
{head} DETAIL:  Parameters: $1 = '{{bench.deliver}}'
{introspection if driver else ""}\
{head} LOG:  execute __asyncpg_stmt_6__: WITH r0 AS (INSERT INTO uns_notifications \
(id, key, notification, next_attempt, dedup_key, principal) SELECT r.id, r.key, \
r.notification::jsonb, r.next_attempt, r.dedup_key, r.principal FROM unnest(\
$4::VARCHAR(36)[], $5::VARCHAR(64)[], $6::text[], $7::TIMESTAMP WITH TIME ZONE[], \
$8::VARCHAR(64)[], $9::VARCHAR(255)[]) AS r(id, key, notification, next_attempt, dedup_key, \
principal) RETURNING 1), gate AS (SELECT pg_advisory_xact_lock($1), pg_notify($3, $2) \
WHERE (SELECT count(*) FROM r0) >= 0) INSERT INTO uns_events (id, notification_id, at, \
payload) SELECT e.id, e.notification_id, e.at, e.payload::jsonb FROM unnest($10::text[], \
$11::text[], $12::TIMESTAMP WITH TIME ZONE[], $13::text[]) AS e(id, notification_id, at, \
payload) WHERE (SELECT true FROM gate)
{head} DETAIL:  Parameters: $1 = '366386282498', $2 = 'fa997bd8cb084c0ea2fefcaaddcdbc70', \
$3 = 'uns_events', $4 = '{{{nid}}}', $5 = '{{{key}}}', \
$6 = '{{"{{\\"message\\":\\"it''s 12:41:45, a \\\\\\\\ b\\",\\"n\\":null}}"}}', \
$7 = '{{"2026-12-02 12:41:45.1+00"}}', $8 = '{{NULL}}', $9 = '{{"bench ops"}}', \
$10 = '{{7cbc32d3-68c5-4aaf-bfa0-14370240e232}}', $11 = '{{{nid}}}', \
$12 = '{{"2026-12-02 12:41:45.1+00"}}', $13 = '{{"{{\\"revision\\":1}}"}}'
{head} LOG:  statement: COMMIT;
"""


FIRST_ID, LAST_ID = "f8ff7e61-2fcc-4cd6-b43b-4a23ea04dbcc", "50c32f26-1b1c-4c55-9a0e-0b3e8e1f4f7a"
ONE_STATEMENT_LOG = _one_statement_accept(
    16641, "45.100", FIRST_ID, "a" * 64, driver=True
) + _one_statement_accept(16641, "45.200", LAST_ID, "b" * 64, driver=False)


def test_array_literals_parse_as_postgresql_writes_them() -> None:
    assert capture.parse_array('{a,"b c",NULL,"NULL","x\\"y\\\\z",""}') == [
        "a", "b c", None, "NULL", 'x"y\\z', ""
    ]  # fmt: skip
    assert capture.parse_array("{{1,2},{3,NULL}}") == [["1", "2"], ["3", None]]
    assert capture.parse_array("{}") == []
    # JSON objects and broken arrays are not arrays
    assert capture.parse_array('{"a": 1}') is None
    assert capture.parse_array('{"a":{"b":2}}') is None
    assert capture.parse_array('{"a",b') is None
    assert capture.parse_array("{a}x") is None


def test_only_ids_keys_and_timestamps_are_freshened() -> None:
    values = [
        "'2026-12-02 12:41:45.1+05:30'",
        "'{\"2026-12-02 12:41:45+00\",NULL}'",
        "'2026-12-02 12:41:45 disk full'",  # a text that only starts like a timestamp
        "'{\"a b\",c}'",
        "NULL",
    ]
    stmt = capture.Statement(
        "SELECT " + ", ".join(f"${n}" for n in range(1, 6)), dict(enumerate(values, 1))
    )
    assert capture.pgbench_script([stmt]) == (
        "SELECT (now()), (ARRAY[now(), NULL]), (E'2026-12-02 12\\x3a41\\x3a45 disk full'), "
        "('{\"a b\",c}'), (NULL);\n"
    )


def test_literals_hide_colons_from_pgbench() -> None:
    assert capture.quote("it's") == "'it''s'"
    assert capture.quote("it's 12:41 a\\b") == "E'it''s 12\\x3a41 a\\\\b'"
    # as pgbench's parser: a run of colons is skipped whole (casts), then names
    assert capture.pgbench_variables("SELECT (md5(:v1::text)), 'a'::text, :v2, x:::v3") == [
        "v1", "v2"
    ]  # fmt: skip
    # pgbench does not know SQL quoting: these read as variables too
    assert capture.pgbench_variables("SELECT '12:41:45', '{\"a\":null}', ':é'") == [
        "41", "45", "null", "é"
    ]  # fmt: skip


def test_the_accept_taken_is_the_last_without_driver_introspection() -> None:
    tx = capture.accept_transaction(ONE_STATEMENT_LOG)
    assert [s.verb().split()[0] for s in tx] == ["BEGIN", "SELECT", "SELECT", "WITH", "COMMIT"]
    assert tx[3].params[4] == f"'{{{LAST_ID}}}'"
    # when every accept is a connection's first, its introspection is left out
    first_only = _one_statement_accept(16641, "45.100", FIRST_ID, "a" * 64, driver=True)
    tx = capture.accept_transaction(first_only)
    assert [s.verb().split()[0] for s in tx] == ["BEGIN", "SELECT", "SELECT", "WITH", "COMMIT"]
    assert tx[3].params[4] == f"'{{{FIRST_ID}}}'"
    assert not any("jit" in s.sql or "typeinfo" in s.sql for s in tx)


def test_pgbench_script_freshens_ids_inside_array_parameters() -> None:
    script = capture.pgbench_script(capture.accept_transaction(ONE_STATEMENT_LOG))
    key = "md5(:v1::text) || md5('k' || :v1::text)"
    # the idempotency lookup and the row insert use the same fresh key ...
    assert f"ANY ((ARRAY[{key}]))" in script
    assert f"(ARRAY[{key}])::VARCHAR(64)[]" in script
    # ... and the row and its event the same fresh notification id
    assert script.count("(ARRAY[md5(:v2::text)::uuid::text])") == 2
    assert "(ARRAY[md5(:v3::text)::uuid::text])::text[]" in script  # the event's id
    assert script.count("(ARRAY[now()])::TIMESTAMP WITH TIME ZONE[]") == 2
    # arrays with nothing to freshen stay one literal, typed by their context
    assert "ANY (('{bench.deliver}'))" in script
    assert "('{NULL}')::VARCHAR(64)[]" in script
    assert """('{"bench ops"}')::VARCHAR(255)[]""" in script
    assert "('366386282498')" in script  # the advisory lock is one for all
    # JSON text keeps its escapes; its ':' cannot read as a pgbench variable
    assert (
        """(E'{"{\\\\"message\\\\"\\x3a\\\\"it''s 12\\x3a41\\x3a45, """
        """a \\\\\\\\\\\\\\\\ b\\\\",\\\\"n\\\\"\\x3anull}"}')::text[]"""
    ) in script
    assert set(capture.pgbench_variables(script)) == {"v1", "v2", "v3"}
    assert script.splitlines()[:3] == [
        f"\\set v{n} random(1, {capture.RANDOM_MAX})" for n in (1, 2, 3)
    ]
    assert script.rstrip().endswith("COMMIT;")


def test_pgbench_script_refuses_a_statement_pgbench_would_misread() -> None:
    tx = [capture.Statement("SELECT 1 WHERE 'a' <> ':name'")]
    try:
        capture.pgbench_script(tx)
    except ValueError as exc:
        assert "name" in str(exc)
    else:
        raise AssertionError("a stray :name was let through")


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
