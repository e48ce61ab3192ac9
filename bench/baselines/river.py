"""The Go peer queue baseline: River (github.com/riverqueue/river) on the same PostgreSQL.

``bench/river`` is a small Go program (its own go.mod, versions pinned in go.sum):
on a database of its own it creates River's tables with ``rivermigrate``, inserts N
no-op jobs with ``InsertMany`` in batches of the batch workload's size from as many
producers, then starts a River client and works them all. It prints a progress line
per phase (the CPU meter follows them) and one JSON result. It is built with
``go build`` into the run directory; modules come from the Go module proxy on the
first build. Without ``go`` the rows are absent (``available``).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path
from typing import Any

from bench.cpu import CpuMeter, Window
from bench.harness import Harness
from bench.stats import Row

SOURCE = Path(__file__).resolve().parents[1] / "river"
DATABASE = "river"
WORKERS = 1000  # River's MaxWorkers for the default queue (goroutines: no-op jobs)
BUILD_TIMEOUT_SECONDS = 600.0
RESULT_LINE_LIMIT = 64 * 1024 * 1024


def go() -> str | None:
    """``go`` on PATH, else the usual install location."""
    found = shutil.which("go")
    if found is None and os.access("/usr/local/go/bin/go", os.X_OK):
        found = "/usr/local/go/bin/go"
    return found


def available() -> bool:
    return go() is not None


async def build(out_dir: Path) -> Path:
    """``go build`` of bench/river into ``out_dir``; returns the binary."""
    exe = go()
    if exe is None:
        raise RuntimeError("go not found: River baseline skipped")
    binary = out_dir / "riverbench"
    proc = await asyncio.create_subprocess_exec(
        exe, "build", "-mod=readonly", "-o", str(binary), ".",
        cwd=SOURCE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        async with asyncio.timeout(BUILD_TIMEOUT_SECONDS):
            out, _ = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    if proc.returncode != 0:
        raise RuntimeError(f"go build of {SOURCE} failed:\n{out.decode(errors='replace')[-2000:]}")
    return binary


async def run(
    harness: Harness,
    binary: Path,
    *,
    jobs: int,
    batch: int,
    producers: int,
    cap_seconds: float,
    workers: int = WORKERS,
) -> list[Row]:
    """InsertMany of ``jobs`` no-op jobs, then River working them: two rows."""
    harness.pg.createdb(DATABASE)
    try:
        result, windows = await _child(
            harness, binary, jobs, batch, producers, cap_seconds, workers
        )
    finally:
        await harness.drop_database(DATABASE)
    insert, work = windows.get("insert"), windows.get("work")
    setting = f"b={batch} c={producers}"
    common = {"river": result["river"], "max_workers": workers}
    return [
        Row(
            group="peer",
            name="river InsertMany",
            setting=setting,
            ops=result["inserted"],
            seconds=result["insert_seconds"],
            latencies_ms=result["batch_latencies_ms"] or [],
            server_cpu_s=insert.server if insert else None,
            db_cpu_s=insert.db if insert else None,
            note="latency per InsertMany call",
            extra=dict(common),
        ),
        Row(
            group="peer",
            name="river work",
            setting=f"n={result['inserted']}",
            ops=result["worked"],
            seconds=result["work_seconds"],
            server_cpu_s=work.server if work else None,
            db_cpu_s=work.db if work else None,
            note="cap hit" if result["cap_hit"] else f"no-op jobs, MaxWorkers={workers}",
            extra=dict(common),
        ),
    ]


async def _child(
    harness: Harness,
    binary: Path,
    jobs: int,
    batch: int,
    producers: int,
    cap_seconds: float,
    workers: int,
) -> tuple[dict[str, Any], dict[str, Window]]:
    log = (harness.run_dir / "river.log").open("wb")
    proc = await asyncio.create_subprocess_exec(
        str(binary), "-dsn", harness.dsn(DATABASE), "-jobs", str(jobs), "-batch", str(batch),
        "-producers", str(producers), "-workers", str(workers), "-cap", str(cap_seconds),
        stdout=asyncio.subprocess.PIPE, stderr=log, limit=RESULT_LINE_LIMIT,
    )  # fmt: skip
    log.close()
    meter = CpuMeter(lambda: proc.pid, harness.postmaster)
    windows: dict[str, Window] = {}
    result: dict[str, Any] = {}
    current: str | None = None
    stray: list[str] = []  # anything on stdout that is not one of its JSON lines
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(cap_seconds * 3 + 60):
            async for raw in proc.stdout:
                if not raw.strip().startswith(b"{"):
                    stray.append(raw.decode(errors="replace").strip())
                    continue
                message = json.loads(raw)
                phase = message.get("phase")
                if phase is not None and current is not None:
                    windows[current] = meter.stop()
                if phase in ("insert", "work"):
                    current = phase
                    meter.start()
                elif phase is None:
                    result = message
            await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    if not result or proc.returncode != 0:
        raise RuntimeError(
            f"River child exited {proc.returncode}; see {harness.run_dir / 'river.log'}; "
            f"stdout: {' | '.join(stray)[-500:]}"
        )
    return result, windows
