"""The run: start PostgreSQL and the receiver, run each workload in turn, report.

Order matters only for noise: the drain phase comes first because it also captures
the accept transaction that the pgbench baseline replays; the baselines then run
while no uns-server is alive; the peer queue runs last on its own database.
"""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from bench import capture, config, ghz, pairs, profiling, report, trees
from bench import phases as phase_cpu
from bench.baselines import echo, peer, pgbench, river
from bench.cpu import CpuMeter
from bench.harness import WEBHOOK_SECRET, Harness, ServerChild
from bench.receiver import WebhookReceiver
from bench.stats import Row
from bench.workloads import (
    accept,
    batch,
    console,
    deliver,
    drain,
    growth,
    outside,
    processes,
    watch,
)
from bench.workloads.common import Contestant

MAIN_DATABASE = "uns_main"
PGBENCH_DATABASE = "pgb"


@dataclass(frozen=True)
class Options:
    quick: bool
    workloads: tuple[str, ...]
    out_dir: Path
    profile: bool = False
    fsync: bool = False
    smoke: bool = False
    install: bool = True
    phases: bool = False
    before: str | None = None  # a git revision or a directory: pair the ghz rows with it
    pairs: int | None = None  # rounds per pair; None: the profile's ghz_pairs


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


async def run(options: Options) -> int:
    profile = config.SMOKE if options.smoke else config.QUICK if options.quick else config.FULL
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    run_dir = (options.out_dir / f"{stamp}-{profile.name}").resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    tag = f"b{stamp}"
    started = time.monotonic()
    rows: list[Row] = []
    phases: dict[str, float] = {}
    errors: dict[str, str] = {}
    meta: dict[str, Any] = {
        "started": stamp,
        "profile": profile.name,
        "run_dir": str(run_dir),
        "load_average_start": os.getloadavg()[0],
    }
    hotspots: dict[str, Any] | None = None
    want = set(options.workloads)
    _log(f"bench {profile.name}: results in {run_dir}")

    receiver = WebhookReceiver(WEBHOOK_SECRET)
    harness: Harness | None = None
    cleanup = contextlib.ExitStack()
    pair: tuple[trees.Tree, trees.Tree] | None = None
    # Rounds pair two trees; a run of one tree measures each row once, as before pairs.
    rounds = (options.pairs or profile.ghz_pairs) if options.before is not None else 1
    try:
        if options.before is not None:
            try:
                before = cleanup.enter_context(trees.materialise(options.before, run_dir))
            except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
                _log(f"bench: --before {options.before}: {exc}")
                return 2
            pair = (before, trees.current(before))
            meta["pairs"] = {
                "rounds": rounds,
                **{t.label: {"revision": t.revision, "root": str(t.root)} for t in pair},
            }
            _log(f"pairs: before = {before.revision} ({before.root}), after = {pair[1].revision}")
        harness = Harness(run_dir, fsync=options.fsync)
        await receiver.start()
        harness.write_channels(receiver.url())
        meta.update(await _machine(harness))
        accept_sql: list[capture.Statement] | None = None

        async def phase(name: str, body: Any, empty: Any = ()) -> Any:
            """Run one phase; a failure is reported and the run goes on without it."""
            _log(f"{name} ...")
            t0 = time.monotonic()
            try:
                return await body
            except Exception as exc:
                errors[name] = f"{type(exc).__name__}: {exc}"[:2000]
                _log(f"{name} FAILED: {errors[name]}")
                traceback.print_exc()
                return empty
            finally:
                phases[name] = round(time.monotonic() - t0, 1)
                _log(f"{name} done in {phases[name]} s")

        if want & {"drain", "pgbench"}:
            measure = "drain" in want
            outcome = await phase(
                "drain" if measure else "capture",
                drain.run(harness, receiver, profile, measure=measure),
                None,
            )
            if outcome is not None:
                accept_sql = outcome.accept_sql
                if outcome.row is not None:
                    rows.append(outcome.row)
        if "pgbench" in want and accept_sql is not None:
            rows += await phase("pgbench", _pgbench(harness, profile, accept_sql, run_dir))
            meta["accept_transaction_sql"] = [s.sql for s in accept_sql]
        if "echo" in want:
            rows += await phase("echo", echo.run(harness, profile, tag))
        if want & {"accept", "deliver", "watch"}:
            main_rows, hotspots = await phase(
                "uns",
                _uns(harness, receiver, profile, options, run_dir, tag, pair, rounds),
                ([], None),
            )
            rows += main_rows
        if "ghz" in want:
            exe = ghz.locate(install=options.install)
            if exe is not None:
                ghz_rows = outside.run(harness, receiver, profile, tag, exe,
                                       phases=options.phases, pair=pair, rounds=rounds)  # fmt: skip
                rows += await phase("ghz", ghz_rows)
            else:
                meta["ghz"] = "not found: run scripts/install-tools.sh, or put go on PATH"
                _log(f"ghz {meta['ghz']}; skipped")
        if "growth" in want:
            rows += await phase("growth", growth.run(harness, profile, tag))
        if "processes" in want:
            rows += await phase("processes", processes.run(harness, profile, tag))
        if "console" in want:
            rows += await phase("console", console.run(harness, receiver, profile, tag))
        if "batch" in want:
            spots: batch.Hotspots | None = {} if options.profile else None
            work = batch.run(harness, profile, tag, spots)
            batch_rows, notes = await phase("batch", work, ([], {}))
            rows += batch_rows
            meta.update(notes)
            if spots:
                meta["batch_hotspots"] = spots
            if river.available():  # as many jobs as notifications were accepted
                jobs = next((r.ops for r in batch_rows if r.name == "batch accept"), 0)
                rows += await phase("river", batch.river_rows(harness, profile, jobs or
                                                              profile.batch_items))  # fmt: skip
            else:
                meta["river"] = "go not found: the River rows were skipped"
                _log(meta["river"])
        if "peer" in want:
            if peer.available():
                rows += await phase("peer", peer.run(harness, profile))
            else:
                _log("peer: procrastinate not installed, skipped")
    finally:
        with contextlib.suppress(Exception):
            await receiver.stop()
        if harness is not None:
            harness.close()
        cleanup.close()  # the exported before tree, once nothing runs from it

    meta["load_average_end"] = os.getloadavg()[0]
    meta["phase_seconds"] = phases
    meta["errors"] = errors
    meta["total_seconds"] = round(time.monotonic() - started, 1)
    results = report.Results(_ordered(rows))
    text = report.render(results, os.cpu_count())
    pair_lines = pairs.render(results)
    if pair_lines:  # the per-tree ghz blocks and phase tables included
        text += "\n\n" + "\n".join(pair_lines)
    elif phase_lines := phase_cpu.table(results.rows):
        text += "\n\n" + "\n".join(phase_lines)
    print()
    print(text)
    if hotspots:
        print()
        print(profiling.render(hotspots))
        meta["hotspots"] = hotspots
    for name, spots in meta.get("batch_hotspots", {}).items():
        print(f"\n{name}: " + profiling.render(spots))
    json_path = run_dir / "results.json"
    report.write_json(json_path, results, meta, {"pairs": pairs.to_json(results)})
    (run_dir / "table.txt").write_text(text + "\n")
    png = run_dir / "latency.png"
    title = f"UNS bench ({profile.name}, {meta.get('cpu_count')} cores, {stamp})"
    charted = report.write_chart(png, results, title)
    print()
    for name, error in errors.items():
        print(f"phase {name} FAILED: {error}")
    print(
        f"load average {meta['load_average_start']:.1f} at start, "
        f"{meta['load_average_end']:.1f} at end ({meta.get('cpu_count')} cores; anything above "
        "what the bench itself runs is a neighbour, and the figures are noisier for it)"
    )
    print(f"total {meta['total_seconds']} s; JSON: {json_path}")
    print(f"chart: {png}" if charted else "chart: skipped (matplotlib not installed)")
    return 1 if errors else 0


async def _pgbench(
    harness: Harness, profile: config.Profile, accept_sql: list[capture.Statement], run_dir: Path
) -> list[Row]:
    harness.create_database(PGBENCH_DATABASE)
    conn = await harness.sql(PGBENCH_DATABASE)
    try:
        await conn.execute(pgbench.SINGLE_ROW_TABLE)
    finally:
        await conn.close()
    meter = CpuMeter(lambda: None, harness.postmaster)
    script = capture.pgbench_script(accept_sql)
    rows = []
    runs = [("accept-tx", script, c) for c in profile.concurrency]
    runs.append(("single-row", pgbench.SINGLE_ROW_SCRIPT, 16))
    for label, text, clients in runs:
        rows.append(
            await pgbench.run(
                harness.pg.pgbench_path(),
                port=harness.pg.port,
                database=PGBENCH_DATABASE,
                script=text,
                label=label,
                clients=clients,
                seconds=profile.seconds,
                work_dir=run_dir,
                meter=meter,
            )
        )
    await harness.check_replay_wrote(PGBENCH_DATABASE, sum(r.ops for r in rows[:-1]))
    await harness.drop_database(PGBENCH_DATABASE)
    return rows


async def _uns(
    harness: Harness,
    receiver: WebhookReceiver,
    profile: config.Profile,
    options: Options,
    run_dir: Path,
    tag: str,
    pair: tuple[trees.Tree, trees.Tree] | None = None,
    rounds: int = 1,
) -> tuple[list[Row], dict[str, Any] | None]:
    """accept, deliver and watch on one server; with ``pair``, accept and deliver on one
    server per tree (windows interleaved as in the ghz workload) and watch on the after
    tree's."""
    # Every bench subscriber is the same principal: lift the per-principal stream cap
    # (100 by default) above the largest watch level.
    streams = str(max(profile.watch_subscribers) + 100)
    rows: list[Row] = []
    sampler: profiling.Sampler | None = None
    servers: list[ServerChild] = []
    contestants: list[Contestant] = []
    try:
        for tree in pair or (None,):
            suffix = f"_{tree.label}" if tree else ""
            harness.create_database(MAIN_DATABASE + suffix, tree)
            servers.append(harness.start_server(
                "main" + suffix.replace("_", "-"), MAIN_DATABASE + suffix, tree,
                watch_streams_per_principal=streams,
            ))  # fmt: skip
        for server in servers:
            await server.wait_serving()
            modules = server.check_tree()
            contestants.append(Contestant(
                server.target, await harness.sql(server.database),
                CpuMeter(lambda s=server: s.pid, harness.postmaster),
                tree=server.tree.label if pair else "",
                extra={"tree_revision": server.tree.revision} if pair else {},
            ))  # fmt: skip
            contestants[-1].extra["uns_server"] = modules["uns_server"]
        main = servers[-1]  # the after tree's, when paired
        if options.profile:
            sampler = profiling.Sampler(main.pid, run_dir, "uns-main")
        if "accept" in options.workloads:
            rows += await accept.run(contestants, profile, tag, rounds)
        if "deliver" in options.workloads:
            rows += await deliver.run(contestants, receiver, profile, tag, rounds)
        if "watch" in options.workloads:
            rows += await watch.run(main.target, profile, contestants[-1].meter, main.pid, tag)
    finally:
        if sampler is not None:
            sampler.stop()
        for contestant in contestants:
            await contestant.db.close()
        for server in servers:
            await server.aclose()
    hotspots = profiling.summarize(sampler.raw) if sampler is not None else None
    return rows, hotspots


_ORDER = (
    "accept", "grpc echo", "pgbench accept-tx", "pgbench single-row", "procrastinate defer",
    "deliver", "procrastinate process", "watch", "drain", "growth", "processes", "console",
    "console idle", "ghz echo", "ghz accept", "ghz accept+log", "ghz accept+webhook",
    "aiohttp POST", "batch accept", "pgbench batch-insert", "river InsertMany", "batch drain",
    "river work",
)  # fmt: skip


def _ordered(rows: list[Row]) -> list[Row]:
    return sorted(rows, key=lambda r: _ORDER.index(r.name) if r.name in _ORDER else 99)


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return ""


async def _machine(harness: Harness) -> dict[str, Any]:
    conn = await harness.sql("postgres")
    try:
        pg_version = await conn.fetchval("SHOW server_version")
    finally:
        await conn.close()
    versions = {}
    for dist in ("grpcio", "protobuf", "sqlalchemy", "asyncpg", "aiohttp", "procrastinate"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[dist] = metadata.version(dist)
    return {
        "cpu_count": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "postgresql": pg_version,
        "postgresql_fsync": harness.pg.fsync,
        "packages": versions,
    }
