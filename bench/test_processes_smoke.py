"""The processes workload at token size: a real PostgreSQL and ``uns-server
--processes N`` at N = 1 and 2 (and more with the cores), every level measured (no
timings asserted)."""

from __future__ import annotations

import os
from pathlib import Path

from bench import config, report
from bench.harness import Harness
from bench.stats import Row
from bench.workloads import processes


def test_process_counts_double_while_there_are_cores() -> None:
    assert processes.process_counts(1) == (1, 2)
    assert processes.process_counts(2) == (1, 2)
    assert processes.process_counts(6) == (1, 2, 4)
    assert processes.process_counts(8) == (1, 2, 4, 8)
    assert processes.process_counts(None) == (1, 2)


def test_the_table_compares_with_one_process_and_shows_the_load() -> None:
    rows = [
        Row("uns", "processes", f"n={n} c=16", ops=ops, seconds=1.0, server_cpu_s=1.0,
            extra={"processes": n, "load_average_start": 0.5, "load_average_end": 2.25,
                   "cpu_count": 4})
        for n, ops in ((1, 400), (2, 600))
    ]  # fmt: skip
    lines = report.processes_table(report.Results(rows))
    assert "4 cores" in lines[0]
    assert lines[2] == (
        "  --processes 2: 600/s (1.50x one process), server CPU 1.67 ms per accept, "
        "load average 0.5 -> 2.2"
    )
    assert report.processes_table(report.Results([])) == []


async def test_every_process_count_is_measured(tmp_path: Path) -> None:
    harness = Harness(tmp_path)
    try:
        harness.write_channels("http://127.0.0.1:9/unused")  # accept uses the log channel
        rows = await processes.run(harness, config.SMOKE, "smoke")
    finally:
        harness.close()
    assert [r.extra["processes"] for r in rows] == list(processes.process_counts(os.cpu_count()))
    for row in rows:
        assert row.ops > 0 and not row.note.count("errors"), (row.setting, row.note)
        assert row.server_cpu_s is not None and row.server_cpu_s > 0
        assert row.note.startswith("load ")
    text = "\n".join(report.processes_table(report.Results(rows)))
    assert "--processes 2:" in text and "x one process" in text
