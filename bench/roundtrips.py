"""Round trips to PostgreSQL per accept and per settle, counted with strace (issue 33 item 3).

    .venv/bin/python -m bench.roundtrips                    # this tree, 200 calls per row
    .venv/bin/python -m bench.roundtrips --before main      # and main's tree beside it
    .venv/bin/python -m bench.roundtrips --calls 20         # a quick look

For each tree: a fresh database on one embedded PostgreSQL, one uns-server on it, and
``strace -f -yy -e trace=sendto,recvfrom,sendmsg,recvmsg -p <server>`` attached while
one producer sends ``--calls`` SendNotification calls back to back (c=1: nothing is
grouped, each call is its own transaction). Two rows:

- ``accept``: the server runs with dispatch off, so the calls are all it does;
- ``accept+log``: dispatch on, the ``log`` channel: each call is also delivered and
  settled (the accept hands the new row to the local dispatcher already leased, so
  there is no claim transaction: accept+log minus accept is the settle, plus the
  dispatcher's rare idle read).

A round trip is one ``sendto`` on a socket connected to PostgreSQL's port (asyncpg
writes each batch of protocol messages with one ``send``, and waits for the answer
before the next one): strace's ``-yy`` names each socket's peer, which tells them from
gRPC's sockets (``sendmsg``/``recvmsg``). The same window with no calls, just before,
counts what the server does on its own (the hub's idle tail, the workers' polls); its
rate is subtracted. Counts, not timings: they do not drift with the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path

from bench import client, trees
from bench.harness import TYPE_ACCEPT, Harness, ServerChild
from bench.trees import Tree

CALLS_DEFAULT = 200
WARMUP_CALLS = 20  # prepares every statement on the pooled connections first
ATTACH_SECONDS = 1.0
SETTLE_WAIT_SECONDS = 30.0
SYSCALLS = ("sendto", "recvfrom", "sendmsg", "recvmsg")
_LINE = re.compile(r"^\d+\s+(\w+)\(\d+<(.*?)\]?>[,)]")


@dataclass(frozen=True)
class Count:
    """One strace window: syscalls by (name, peer) where peer is "pg" or "other"."""

    calls: int
    seconds: float
    by_kind: dict[str, int]

    def per_call(self, idle: Count, key: str) -> float:
        """``key``'s count per call, the idle window's rate taken off."""
        rate = idle.by_kind.get(key, 0) / idle.seconds if idle.seconds else 0.0
        return (self.by_kind.get(key, 0) - rate * self.seconds) / self.calls


def parse(text: str, pg_port: int) -> dict[str, int]:
    """Syscalls in an ``strace -yy`` log by ``<name> pg`` / ``<name> other``: a socket
    whose peer is PostgreSQL's port is "pg"."""
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        match = _LINE.match(line)
        if match is None or match.group(1) not in SYSCALLS:
            continue  # "<... resumed>" halves, signals, exits
        name, peer = match.group(1), match.group(2)
        counts[f"{name} {'pg' if peer.endswith(f'->127.0.0.1:{pg_port}') else 'other'}"] += 1
    return dict(counts)


async def traced(pid: int, work: Awaitable[object], out: Path) -> float:
    """Run ``work`` under strace attached to ``pid``, logging to ``out``: its seconds."""
    strace = shutil.which("strace")
    if strace is None:
        raise RuntimeError("strace not found")
    trace = ",".join(SYSCALLS)
    proc = await asyncio.create_subprocess_exec(
        strace, "-f", "-yy", "-qq", "-s", "0", "-e", f"trace={trace}", "-o", str(out),
        "-p", str(pid), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        await asyncio.sleep(ATTACH_SECONDS)
        started = time.monotonic()
        await work
        return time.monotonic() - started
    finally:
        proc.terminate()  # strace detaches on SIGTERM, leaving the server running
        await proc.wait()


async def _pending(harness: Harness, database: str) -> int:
    conn = await harness.sql(database)
    try:
        value = await conn.fetchval(
            "SELECT count(*) FROM uns_notifications WHERE status = 'PENDING'"
        )
        return int(value)
    finally:
        await conn.close()


async def measure(
    harness: Harness, tree: Tree, calls: int, *, dispatch: bool, run_dir: Path, statements: bool
) -> dict[str, object]:
    """One row: ``calls`` accepts (and their deliveries when ``dispatch``) under strace,
    beside an idle window as long."""
    label = f"{tree.label}-{'log' if dispatch else 'accept'}"
    database = f"rt_{label.replace('-', '_')}"
    harness.create_database(database, tree)
    server: ServerChild = harness.start_server(
        label, database, tree, dispatch_enabled="true" if dispatch else "false"
    )
    try:
        await server.wait_serving()
        server.check_tree()
        async with client.channel(server.target) as chan:
            stub = client.stub(chan)

            async def send(n: int) -> None:
                req = client.send_request(TYPE_ACCEPT, f"rt-{label}-{n}")
                await stub.SendNotification(req, metadata=client.METADATA, timeout=30)

            async def settled() -> None:
                deadline = time.monotonic() + SETTLE_WAIT_SECONDS
                while dispatch and time.monotonic() < deadline:
                    if await _pending(harness, database) == 0:
                        return
                    await asyncio.sleep(0.05)

            async def sends(first: int, count: int) -> None:
                for n in range(first, first + count):
                    await send(n)
                    if dispatch:  # one delivery at a time: each settle its own transaction
                        await _delivered(harness, database, n + 1)

            await sends(0, WARMUP_CALLS)
            await settled()
            if statements:
                await _log_statements(harness, "all")
            logged_from = harness.pg.log.stat().st_size
            busy_log, idle_log = run_dir / f"{label}.st", run_dir / f"{label}-idle.st"
            busy_s = await traced(server.pid, sends(WARMUP_CALLS, calls), busy_log)
            # The idle window: the server on its own for as long as the calls took.
            logged = _statements(harness.pg.log, logged_from, database)
            if statements:
                await _log_statements(harness, "none")
            idle_s = await traced(server.pid, asyncio.sleep(busy_s), idle_log)
    finally:
        await server.aclose()
        await harness.drop_database(database)
    busy = parse(busy_log.read_text(errors="replace"), harness.pg.port)
    idle = parse(idle_log.read_text(errors="replace"), harness.pg.port)
    window, quiet = Count(calls, busy_s, busy), Count(0, idle_s, idle)
    keys = sorted(set(busy) | set(idle))
    return {
        "tree": f"{tree.label} {tree.revision}",
        "row": "accept+log" if dispatch else "accept",
        "calls": calls,
        "seconds": round(busy_s, 2),
        "per_call": {k: round(window.per_call(quiet, k), 2) for k in keys},
        "window": busy,
        "idle": idle,
        "statements_per_call": {k: round(v / calls, 2) for k, v in logged.most_common()},
    }


async def _log_statements(harness: Harness, setting: str) -> None:
    conn = await harness.sql("postgres")
    try:
        await conn.execute(f"ALTER SYSTEM SET log_statement = '{setting}'")
        await conn.execute("SELECT pg_reload_conf()")
        await asyncio.sleep(0.5)  # every backend has read it
    finally:
        await conn.close()


_LOGGED = re.compile(r"LOG:\s+(?:statement|execute [^:]*): (.*)")


def _statements(log: Path, offset: int, database: str) -> Counter[str]:
    """What PostgreSQL logged (``log_statement = all``) since ``offset``, by the
    statement's first 60 characters. The harness's own polls are left out."""
    counts: Counter[str] = Counter()
    with log.open("rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
    for line in text.splitlines():
        match = _LOGGED.search(line)
        if match is None or "uns_notifications WHERE status" in line:
            continue
        counts[" ".join(match.group(1).split())[:60]] += 1
    del database
    return counts


async def _delivered(harness: Harness, database: str, count: int) -> None:
    """Wait until ``count`` notifications are no longer PENDING (delivered, c=1)."""
    conn = await harness.sql(database)
    try:
        deadline = time.monotonic() + SETTLE_WAIT_SECONDS
        while time.monotonic() < deadline:
            done = await conn.fetchval(
                "SELECT count(*) FROM uns_notifications WHERE status <> 'PENDING'"
            )
            if int(done) >= count:
                return
            await asyncio.sleep(0.002)
        raise RuntimeError(f"{count} notifications not settled in {SETTLE_WAIT_SECONDS} s")
    finally:
        await conn.close()


async def run(
    calls: int, before: str | None, run_dir: Path, *, statements: bool = False
) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    with contextlib.ExitStack() as stack:
        old = stack.enter_context(trees.materialise(before, run_dir)) if before else None
        harness = Harness(run_dir)
        stack.callback(harness.close)
        harness.write_channels("http://127.0.0.1:9/unused")  # the accept type logs
        now = trees.current(old)
        for tree in [t for t in (old, now) if t is not None]:
            for dispatch in (False, True):
                rows.append(
                    await measure(
                        harness, tree, calls, dispatch=dispatch, run_dir=run_dir,
                        statements=statements,
                    )
                )  # fmt: skip
    return rows


def render(rows: list[dict[str, object]]) -> str:
    lines = [
        "| tree | row | calls | sendto to PostgreSQL per call | recvfrom from PostgreSQL "
        "per call | sendto / recvfrom, other sockets | sendmsg / recvmsg (gRPC) per call |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        pc: dict[str, float] = r["per_call"]  # type: ignore[assignment]

        def get(key: str, pc: dict[str, float] = pc) -> str:
            return f"{pc.get(key, 0.0):.2f}"

        lines.append(
            f"| {r['tree']} | {r['row']} | {r['calls']} | {get('sendto pg')} | "
            f"{get('recvfrom pg')} | {get('sendto other')} / {get('recvfrom other')} | "
            f"{get('sendmsg other')} / {get('recvmsg other')} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.roundtrips", description=__doc__)
    parser.add_argument("--calls", type=int, default=CALLS_DEFAULT)
    parser.add_argument("--before", help="also count a git revision's (or a directory's) tree")
    parser.add_argument("--json", type=Path, help="write the rows here too")
    parser.add_argument(
        "--statements",
        action="store_true",
        help="also log every statement (log_statement = all) and list them per call",
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="uns-roundtrips-") as tmp:
        rows = asyncio.run(run(args.calls, args.before, Path(tmp), statements=args.statements))
    print(render(rows))
    for r in rows if args.statements else ():
        print(f"\n{r['tree']}, {r['row']}: statements per call")
        for statement, per_call in r["statements_per_call"].items():  # type: ignore[attr-defined]
            print(f"  {per_call:5.2f}  {statement}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
