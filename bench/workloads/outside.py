"""ghz: server CPU per call with the load generator in a process of its own.

The in-process load generator shares the bench's interpreter and cores with nothing
measured, but its speed bounds the rate and its CPU competes with the server's on two
cores. ghz (Go) drives SendNotification instead, and each row's server column is the
measured server process's CPU from /proc over the window, per call. Rows, at each
``ghz_concurrency`` level:

``ghz echo``            the bare grpc.aio echo server: the Python gRPC floor per call
``ghz accept``          UNS with dispatch off: the accept alone
``ghz accept+log``      UNS with dispatch on, log channel; the window runs until every
                        accepted notification is delivered, so it holds both halves
``ghz accept+webhook``  the same, webhook channel to the loopback receiver; the window
                        runs until the receiver has every notification
``aiohttp POST``        a bare aiohttp client POSTing the same signed envelope to the same
                        receiver (bench/baselines/post_loop.py): the HTTP floor per call

Latency columns are ghz's accept latency (call start to answer), also for the
accept+delivery rows; end-to-end delivery latency is the ``deliver`` workload's.

With ``pair`` (``python -m bench --before REV``) every UNS row is measured from two
trees, before and after: one server per tree, both alive through the phase, and
``rounds`` windows of each at every level, interleaved (``schedule``). Those rows carry
a ``variant`` ("before 1", "after 1", ...) and bench/pairs.py sets them side by side;
the baselines run once, shared by both.

With ``phases`` (``python -m bench --phases``) the UNS servers also account their CPU
per pipeline phase (bench/phases.py); each UNS row then carries ``phase_cpu_s`` and
the calls per intake transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg

from bench import ghz
from bench.config import Profile
from bench.cpu import CpuMeter, Window
from bench.harness import TYPE_ACCEPT, TYPE_DELIVER, WEBHOOK_SECRET, Harness, ServerChild
from bench.phases import PhaseMeter, Sample
from bench.receiver import WebhookReceiver
from bench.stats import Row
from bench.trees import Tree
from bench.workloads.common import schedule, wait_backlog
from tests.support.postgres import free_port

DATABASE_OFF = "uns_ghz_off"
DATABASE_ON = "uns_ghz_on"
READY_TIMEOUT_SECONDS = 30.0
POST_MAX_OPS = 1_000_000  # the POST loop is bounded by its seconds


class _Levels:
    """What every level shares: the ghz binary, the protoset, unique key prefixes, and
    the trees whose servers are measured (one, or a before/after pair)."""

    def __init__(
        self, exe: str, protoset: Path, profile: Profile, tag: str, phases: bool,
        pair: tuple[Tree, Tree] | None = None, rounds: int = 1,
    ) -> None:  # fmt: skip
        self.phases = phases
        self.exe = exe
        self.protoset = protoset
        self.profile = profile
        self.tag = tag
        self.trees: tuple[Tree | None, ...] = pair or (None,)
        self.rounds = rounds if pair else 1
        self._runs = 0

    def windows(self, servers: list[_Uns]) -> list[tuple[int, _Uns]]:
        """(round, server) in the order a level measures them (``schedule``)."""
        return [(r, servers[i]) for r, i in schedule(len(servers), self.rounds)]

    def prefix(self, label: str) -> str:
        self._runs += 1
        return f"{self.tag}-{label}-{self._runs}-"

    async def warm(self, target: str, notification_type: str, concurrency: int) -> None:
        if self.profile.ghz_warmup_seconds > 0:
            request = ghz.send_request(notification_type, self.prefix("warm"))
            await ghz.run(self.exe, target, self.protoset, request, concurrency=concurrency,
                          seconds=self.profile.ghz_warmup_seconds)  # fmt: skip

    async def load(
        self, target: str, notification_type: str, concurrency: int, prefix: str
    ) -> ghz.GhzResult:
        request = ghz.send_request(notification_type, prefix)
        return await ghz.run(self.exe, target, self.protoset, request, concurrency=concurrency,
                             seconds=self.profile.ghz_seconds)  # fmt: skip


def _row(
    group: str,
    name: str,
    concurrency: int,
    result: ghz.GhzResult,
    window: Window,
    sample: Sample | None = None,
    *,
    ops: int | None = None,
    seconds: float | None = None,
    note: str = "",
    variant: str = "",
    extra: dict[str, Any] | None = None,
) -> Row:
    if result.errors:
        note = f"{note}; {result.errors} errors ({result.first_error})".lstrip("; ")
    return Row(
        group=group,
        name=name,
        setting=f"c={concurrency}",
        ops=result.ops if ops is None else ops,
        seconds=result.seconds if seconds is None else seconds,
        latencies_ms=result.latencies_ms,
        server_cpu_s=window.server,
        db_cpu_s=window.db,
        client_cpu_s=result.cpu_s,
        note=note,
        extra={
            "accepted": result.ops,
            "bench_process_cpu_s": window.client,
            **(sample.extra() if sample else {}),
            **(extra or {}),
        },
        variant=variant,
    )


async def run(
    harness: Harness,
    receiver: WebhookReceiver,
    profile: Profile,
    tag: str,
    exe: str,
    *,
    phases: bool = False,
    pair: tuple[Tree, Tree] | None = None,
    rounds: int = 1,
) -> list[Row]:
    """The ghz rows; with ``pair`` (before, after), every UNS row is measured from both
    trees, ``rounds`` times each, interleaved at each level (rows with a ``variant``)."""
    protoset = ghz.write_protoset(harness.run_dir / "uns.protoset")
    levels = _Levels(exe, protoset, profile, tag, phases, pair, rounds)
    rows = await _echo(harness, levels)
    rows += await _accept_dispatch_off(harness, levels)
    rows += await _accept_and_deliver(harness, receiver, levels)
    rows += await _post_baseline(receiver, profile, tag)
    return rows


async def _echo(harness: Harness, levels: _Levels) -> list[Row]:
    port = free_port()
    proc = harness.spawn(
        [sys.executable, "-m", "bench.baselines.echo_server", str(port)], "ghz-echo-server.log"
    )
    target = f"127.0.0.1:{port}"
    meter = CpuMeter(lambda: proc.pid, None)
    rows = []
    try:
        await _wait_listening(port)
        for c in levels.profile.ghz_concurrency:
            await levels.warm(target, TYPE_ACCEPT, c)
            meter.start()
            result = await levels.load(target, TYPE_ACCEPT, c, levels.prefix("echo"))
            rows.append(_row("baseline", "ghz echo", c, result, meter.stop()))
    finally:
        proc.terminate()
        proc.wait(10)
    return rows


async def _wait_listening(port: int) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while True:
        try:
            _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"nothing listens on port {port}") from None
            await asyncio.sleep(0.1)
            continue
        writer.close()
        return


@dataclass
class _Uns:
    """A UNS server importing from one tree, on a fresh database of its own (migrated by
    that tree's code), and the meter of its CPU (and phases)."""

    tree: Tree | None  # None: a run without --before, the current tree measured once
    database: str
    server: ServerChild
    db: asyncpg.Connection
    meter: PhaseMeter
    modules: dict[str, str]

    def variant(self, round_no: int) -> str:
        return "" if self.tree is None else f"{self.tree.label} {round_no + 1}"

    def extra(self) -> dict[str, Any]:
        tree = {} if self.tree is None else {"tree_revision": self.tree.revision}
        return {**tree, "uns_server": self.modules.get("uns_server", "")}


async def _uns_server(
    harness: Harness, levels: _Levels, tree: Tree | None, database: str, label: str,
    **settings: str,
) -> _Uns:  # fmt: skip
    if tree is not None:
        database, label = f"{database}_{tree.label}", f"{label}-{tree.label}"
    harness.create_database(database, tree)
    metrics_url = None
    if levels.phases:
        port = free_port()
        settings |= {"phase_cpu": "1", "metrics_listen": f"127.0.0.1:{port}"}
        metrics_url = f"http://127.0.0.1:{port}/metrics"
    server = harness.start_server(label, database, tree, **settings)
    await server.wait_serving()
    modules = server.check_tree()  # the child imported its own tree's code, or no pair
    meter = PhaseMeter(CpuMeter(lambda: server.pid, harness.postmaster), metrics_url)
    return _Uns(tree, database, server, await harness.sql(database), meter, modules)


@contextlib.asynccontextmanager
async def _uns_servers(
    harness: Harness, levels: _Levels, database: str, label: str, **settings: str
) -> AsyncIterator[list[_Uns]]:
    """One server per tree (both alive for the whole phase, so each window has the same
    idle neighbour); stopped and their databases dropped on exit."""
    started: list[_Uns] = []
    try:
        for tree in levels.trees:
            started.append(await _uns_server(harness, levels, tree, database, label, **settings))
        yield started
    finally:
        for uns in started:
            with contextlib.suppress(Exception):
                await uns.db.close()
            await uns.server.aclose()
            await harness.drop_database(uns.database)


async def _accept_dispatch_off(harness: Harness, levels: _Levels) -> list[Row]:
    rows = []
    async with _uns_servers(
        harness, levels, DATABASE_OFF, "ghz-off", dispatch_enabled="false"
    ) as servers:
        for c in levels.profile.ghz_concurrency:
            for round_no, uns in levels.windows(servers):
                target = uns.server.target
                await levels.warm(target, TYPE_ACCEPT, c)
                await uns.db.execute("ANALYZE uns_notifications")  # steady plans, as accept does
                await uns.meter.start()
                result = await levels.load(target, TYPE_ACCEPT, c, levels.prefix("off"))
                window, sample = await uns.meter.stop()
                rows.append(_row("uns", "ghz accept", c, result, window, sample,
                                 note="dispatch off", variant=uns.variant(round_no),
                                 extra=uns.extra()))  # fmt: skip
    return rows


async def _accept_and_deliver(
    harness: Harness, receiver: WebhookReceiver, levels: _Levels
) -> list[Row]:
    profile = levels.profile
    rows = []
    async with _uns_servers(harness, levels, DATABASE_ON, "ghz-on") as servers:
        for c in profile.ghz_concurrency:
            for round_no, uns in levels.windows(servers):
                target, db = uns.server.target, uns.db
                await levels.warm(target, TYPE_ACCEPT, c)
                await wait_backlog(db, profile.ghz_drain_seconds)
                await db.execute("ANALYZE uns_notifications")
                await uns.meter.start()
                started = time.perf_counter()
                result = await levels.load(target, TYPE_ACCEPT, c, levels.prefix("log"))
                left, _waited = await wait_backlog(db, profile.ghz_drain_seconds)
                window, sample = await uns.meter.stop()
                note = f"{left} not delivered in time" if left else ""
                rows.append(_row("uns", "ghz accept+log", c, result, window, sample,
                                 ops=result.ops - left,
                                 seconds=time.perf_counter() - started, note=note,
                                 variant=uns.variant(round_no), extra=uns.extra()))  # fmt: skip

        for c in profile.ghz_concurrency:
            for round_no, uns in levels.windows(servers):
                target = uns.server.target
                await levels.warm(target, TYPE_DELIVER, c)
                await wait_backlog(uns.db, profile.ghz_drain_seconds)
                prefix = levels.prefix("hook")
                await uns.meter.start()
                started = time.perf_counter()
                result = await levels.load(target, TYPE_DELIVER, c, prefix)
                arrived = await receiver.wait_for(prefix, result.ops, profile.ghz_drain_seconds)
                window, sample = await uns.meter.stop()
                missing = result.ops - arrived
                note = f"{missing} not delivered in time" if missing > 0 else ""
                rows.append(_row("uns", "ghz accept+webhook", c, result, window, sample,
                                 ops=min(arrived, result.ops),
                                 seconds=time.perf_counter() - started, note=note,
                                 variant=uns.variant(round_no), extra=uns.extra()))  # fmt: skip
    return rows


async def _post_baseline(receiver: WebhookReceiver, profile: Profile, tag: str) -> list[Row]:
    rows = []
    for c in profile.ghz_concurrency:
        if profile.ghz_warmup_seconds > 0:
            await _post_child(receiver, c, profile.ghz_warmup_seconds, f"{tag}-postwarm-{c}-")
        result = await _post_child(receiver, c, profile.ghz_seconds, f"{tag}-post-{c}-")
        note = f"{result['errors']} errors ({result['first_error']})" if result["errors"] else ""
        rows.append(
            Row(
                group="baseline",
                name="aiohttp POST",
                setting=f"c={c}",
                ops=result["ops"],
                seconds=result["seconds"],
                latencies_ms=result["latencies_ms"],
                server_cpu_s=result["cpu_s"],  # the POSTing process is what is measured
                note=(note + "; srv CPU = the POSTing client").lstrip("; "),
            )
        )
    return rows


async def _post_child(
    receiver: WebhookReceiver, concurrency: int, seconds: float, prefix: str
) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.baselines.post_loop", receiver.url(), WEBHOOK_SECRET,
        str(concurrency), str(seconds), str(POST_MAX_OPS), prefix,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"post loop exited {proc.returncode}: {err.decode()[-800:]}")
    result: dict[str, Any] = json.loads(out)
    return result
