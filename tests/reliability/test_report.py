"""The report renderer: per database and fault, counts added up over repeated runs."""

from __future__ import annotations

import datetime as dt

from tests.reliability.checker import History, Receipt, check
from tests.reliability.report import render
from tests.reliability.test_checker import NOW, delivered_timeline, view


def line(database: str, label: str, **counts: int) -> dict[str, object]:
    base = check(History(), [], [], now=NOW).counts()
    return {
        "kind": "fault",
        "label": label,
        "database": database,
        "test": f"t::{label}",
        "counts": {**base, **counts},
        "send_errors": {"OK": counts.get("acknowledged", 0)},
        "measured": {},
    }


def test_rows_per_database_and_fault_add_up_repeated_runs() -> None:
    lines = [
        line("postgresql", "sigkill", sends=10, calls=12, acknowledged=10, recovered=2),
        line("postgresql", "sigkill", sends=5, calls=5, acknowledged=5, unknown=2),
        line("sqlite", "sigkill", sends=7, calls=7, acknowledged=7, lost=1),
        {"kind": "outcome", "test": "t::sigkill", "outcome": "passed"},
    ]
    text = render(lines, dt.datetime(2030, 1, 1, tzinfo=dt.UTC), "abc")
    rows = [
        r for r in text.splitlines() if r.startswith("| postgresql |") or r.startswith("| sqlite |")
    ]
    assert rows[0].split(" | ")[4:9] == ["15 (17)", "15", "2", "2", "**0**"]
    assert rows[1].startswith("| sqlite |") and "| **1** |" in rows[1]
    assert "## What was not tested" in text


def test_duplicates_show_how_each_repeat_was_explained() -> None:
    h = History()
    h.ok("k-a", "a")
    report = check(
        h,
        [view("a")],
        delivered_timeline("a"),
        [Receipt("a:hook:1", True, attempt=1), Receipt("a:hook:1", True, attempt=1)],
        now=NOW,
    )
    text = render(
        [{"kind": "fault", "label": "x", "test": "t", "counts": report.counts()}],
        dt.datetime(2030, 1, 1, tzinfo=dt.UTC),
        "abc",
    )
    assert "| 1 (unexplained **1**) |" in text
