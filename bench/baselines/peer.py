"""The peer queue baseline: procrastinate defers (16 concurrent) and processes no-op jobs.

Optional: without the ``procrastinate`` package the rows are simply absent.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from typing import Any

from bench.config import Profile
from bench.cpu import CpuMeter
from bench.harness import Harness
from bench.stats import Row

DATABASE = "peer"
DEFER_CONCURRENCY = 16
WORKER_CONCURRENCY = 8  # like uns-server's default dispatch concurrency
RESULT_LINE_LIMIT = 64 * 1024 * 1024


def available() -> bool:
    return importlib.util.find_spec("procrastinate") is not None


async def run(harness: Harness, profile: Profile) -> list[Row]:
    harness.pg.createdb(DATABASE)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.baselines.peer_child",
        harness.dsn(DATABASE),
        str(profile.peer_jobs),
        str(DEFER_CONCURRENCY),
        str(WORKER_CONCURRENCY),
        str(profile.peer_cap_seconds),
        stdout=asyncio.subprocess.PIPE,
        stderr=(harness.run_dir / "peer.log").open("wb"),
        limit=RESULT_LINE_LIMIT,  # the result line carries every defer latency
    )
    meter = CpuMeter(lambda: proc.pid, harness.postmaster)
    windows: dict[str, Any] = {}
    result: dict[str, Any] = {}
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(profile.peer_cap_seconds * 3 + 60):
            async for raw in proc.stdout:
                message = json.loads(raw)
                phase = message.get("phase")
                if phase in ("process", "done"):
                    windows["defer" if phase == "process" else "process"] = meter.stop()
                if phase in ("defer", "process"):
                    meter.start()
                if phase is None:
                    result = message
            await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    if not result:
        raise RuntimeError(f"procrastinate child failed; see {harness.run_dir / 'peer.log'}")
    defer, process = windows.get("defer"), windows.get("process")
    return [
        Row(
            group="peer",
            name="procrastinate defer",
            setting=f"c={DEFER_CONCURRENCY}",
            ops=result["deferred"],
            seconds=result["defer_seconds"],
            latencies_ms=result["defer_latencies_ms"],
            server_cpu_s=defer.server if defer else None,
            db_cpu_s=defer.db if defer else None,
        ),
        Row(
            group="peer",
            name="procrastinate process",
            setting=f"workers={WORKER_CONCURRENCY}",
            ops=result["processed"],
            seconds=result["process_seconds"],
            server_cpu_s=process.server if process else None,
            db_cpu_s=process.db if process else None,
            note="" if result["processed"] >= result["deferred"] else "cap hit",
        ),
    ]
