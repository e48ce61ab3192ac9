"""Everything the benchmark starts: PostgreSQL, uns-server children, their files.

All of it lives under one run directory and on loopback. ``Harness.close`` (called
from a ``finally``, so also on Ctrl-C) stops every child it started, by pid.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench import trees
from bench.cpu import postmaster_pid
from bench.trees import Tree
from tests.support.postgres import PostgresProcess, free_port

API_KEY = "uns_bench_all_roles_key"
PRINCIPAL = "bench"
WEBHOOK_CHANNEL = "bench-webhook"
WEBHOOK_SECRET = "whsec_" + "YmVuY2gtd2ViaG9vay1zZWNyZXQtMzItYnl0ZXMhIQ=="
SERVING_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 20.0
SLOW_STOP_SECONDS = 3.0

# Notification types and their policies (written with ``uns-admin policies put``).
TYPE_ACCEPT = "bench.accept"  # log channel
TYPE_DELIVER = "bench.deliver"  # signed webhook to the loopback receiver
TYPE_WATCH = "bench.watch"  # log channel
_SPEC = {"delivery_mode": "GUARANTEED", "max_attempts": 5}
POLICIES: list[dict[str, Any]] = [
    {"notification_type": TYPE_ACCEPT, "spec": {"channels": ["log"], **_SPEC}},
    {"notification_type": TYPE_WATCH, "spec": {"channels": ["log"], **_SPEC}},
    {"notification_type": TYPE_DELIVER, "spec": {"channels": [WEBHOOK_CHANNEL], **_SPEC}},
]


class ServerChild:
    """One ``uns-server`` process on a loopback port, importing its code from ``tree``
    (bench/trees.py: it reports which files it loaded, ``modules``)."""

    def __init__(
        self, label: str, run_dir: Path, env: dict[str, str], tree: Tree, database: str = ""
    ) -> None:
        self.label = label
        self.tree = tree
        self.database = database
        self.port = free_port()
        self.target = f"127.0.0.1:{self.port}"
        self.log_path = run_dir / f"server-{label}.log"
        self._log = self.log_path.open("wb")
        command = [sys.executable, "-c", trees.LAUNCH, "--listen", self.target]
        self.proc = subprocess.Popen(
            command,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **tree.env(), **env},
            cwd=tree.root,
            start_new_session=True,  # a terminal Ctrl-C reaches us, and we stop it in order
        )
        self.started = time.monotonic()
        self.stop_requested: float | None = None
        self.stop_seconds: float | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def wait_serving(self) -> float:
        """Seconds from spawn to health SERVING."""
        deadline = time.monotonic() + SERVING_TIMEOUT_SECONDS
        async with grpc.aio.insecure_channel(self.target) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"uns-server exited {self.proc.returncode}: {self.tail()}")
                with contextlib.suppress(grpc.RpcError):
                    reply = await stub.Check(health_pb2.HealthCheckRequest(), timeout=1)
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        return time.monotonic() - self.started
                await asyncio.sleep(0.1)
        raise RuntimeError(f"uns-server never became SERVING: {self.tail()}")

    def modules(self) -> dict[str, str]:
        """The files the child reported it imported: {"uns_server": ..., "uns": ...}."""
        self._log.flush()
        return trees.loaded_modules(self.log_path.read_text(errors="replace"))

    def check_tree(self) -> dict[str, str]:
        """The child's modules, refused unless both come from its own tree."""
        loaded = self.modules()
        wrong = {k: v for k, v in loaded.items() if not self.tree.owns(v)}
        if set(loaded) != {"uns_server", "uns"} or wrong:
            raise RuntimeError(
                f"server {self.label} should import from {self.tree.root}, loaded {loaded}"
            )
        return loaded

    def tail(self, lines: int = 20) -> str:
        self._log.flush()
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    async def aclose(self) -> int | None:
        """SIGTERM and wait without blocking the event loop: the loopback receiver runs on
        it, and a server finishing a webhook POST needs it to answer."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.stop_requested = time.monotonic()
            deadline = self.stop_requested + STOP_TIMEOUT_SECONDS
            dumped = False
            while self.proc.poll() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
                if not dumped and time.monotonic() - self.stop_requested > SLOW_STOP_SECONDS:
                    dumped = True
                    await self._dump_stacks()
            self.stop_seconds = time.monotonic() - self.stop_requested
        return self.stop()

    async def _dump_stacks(self) -> None:
        """A server slow to stop: record where it waits (py-spy dump, if installed)."""
        exe = Path(sys.executable).with_name("py-spy")
        if not exe.exists():
            return
        out = self.log_path.with_suffix(".slow-stop.txt")
        proc = await asyncio.create_subprocess_exec(
            str(exe), "dump", "--pid", str(self.pid),
            stdout=out.open("wb"), stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        await proc.wait()

    def stop(self) -> int | None:
        """Blocking stop (cleanup path): SIGTERM, then SIGKILL after a timeout."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


class Harness:
    """PostgreSQL plus the files every server shares; tracks children for cleanup."""

    def __init__(self, run_dir: Path, *, fsync: bool = False) -> None:
        self.run_dir = run_dir.resolve()  # children run in their tree's root
        self.tree = trees.current()
        self.pg = PostgresProcess(fsync=fsync)
        self.pg.start()
        self.postmaster = postmaster_pid(str(self.pg.data))
        self.servers: list[ServerChild] = []
        self.children: list[subprocess.Popen[bytes]] = []
        self.keys_file = self.run_dir / "keys.json"
        self.keys_file.write_text(
            json.dumps(
                [
                    {
                        "key": API_KEY,
                        "principal": PRINCIPAL,
                        "roles": ["producer", "responder", "operator"],
                    }
                ]
            )
        )
        self.policies_file = self.run_dir / "policies.yaml"
        self.policies_file.write_text(yaml.safe_dump(POLICIES, sort_keys=False))
        self.channels_file = self.run_dir / "channels.yaml"

    def write_channels(self, webhook_url: str) -> None:
        config = {
            WEBHOOK_CHANNEL: {
                "type": "webhook",
                "url": webhook_url,
                "secret": WEBHOOK_SECRET,
                "timeout_seconds": 10,
            }
        }
        self.channels_file.write_text(yaml.safe_dump(config))

    def dsn(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.pg.port}/{database}"

    def _admin(self, database: str, *args: str, tree: Tree | None = None) -> str:
        tree = tree or self.tree
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "uns_server.cli.admin",
                "--database-url",
                self.dsn(database),
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, **tree.env()},
            cwd=tree.root,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"uns-admin {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc.stdout

    def create_database(self, name: str, tree: Tree | None = None) -> str:
        """A database migrated by ``tree``'s code (default: the current tree) with the
        bench policies active; returns its DSN."""
        self.pg.createdb(name)
        self._admin(name, "migrate", tree=tree)
        self._admin(name, "policies", "put", "--file", str(self.policies_file), "--activate",
                    tree=tree)  # fmt: skip
        return self.dsn(name)

    def put_policies(self, database: str, policies: list[dict[str, Any]], path: Path) -> None:
        """More policies (activated) on a database made by ``create_database``."""
        path.write_text(yaml.safe_dump(policies, sort_keys=False))
        self._admin(database, "policies", "put", "--file", str(path), "--activate")

    async def drop_database(self, name: str) -> None:
        """Once a phase is done with its database: otherwise autovacuum cleans up after
        it (100k settled notifications, their events) during the phases that follow,
        and PostgreSQL's CPU column counts that work against them."""
        conn = await asyncpg.connect(self.dsn("postgres"))
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()

    def start_server(
        self, label: str, database: str, tree: Tree | None = None, **settings: str
    ) -> ServerChild:
        if not self.channels_file.exists():
            raise RuntimeError("write_channels(url) before starting a server")
        env = {
            "UNS_DATABASE_URL": self.dsn(database),
            "UNS_API_KEYS_FILE": str(self.keys_file),
            "UNS_CHANNELS_FILE": str(self.channels_file),
            "UNS_DEV_KEY_FILE": str(self.run_dir / "dev-key.txt"),
            # Throughput is measured, not request budgets: a run must never be shed.
            "UNS_RATE_LIMIT_PER_SECOND": "0",
            "UNS_MAX_CONCURRENT_RPCS": "100000",
        }
        env.update({f"UNS_{k.upper()}": v for k, v in settings.items()})
        server = ServerChild(label, self.run_dir, env, tree or self.tree, database)
        self.servers.append(server)
        return server

    def spawn(self, args: Sequence[str], log_name: str) -> subprocess.Popen[bytes]:
        """A helper child (echo server, peer queue) logged into the run directory."""
        log = (self.run_dir / log_name).open("wb")
        proc = subprocess.Popen(
            list(args), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        self.children.append(proc)
        return proc

    async def sql(self, database: str) -> asyncpg.Connection:
        return await asyncpg.connect(self.dsn(database))

    async def check_replay_wrote(self, database: str, transactions: int) -> None:
        """A pgbench replay of UNS's accept that ran ``transactions`` must have inserted
        notifications: the one-statement accept writes nothing when its guard fails (a
        policy reference of another database), which would time a no-op."""
        conn = await self.sql(database)
        try:
            inserted = int(await conn.fetchval("SELECT count(*) FROM uns_notifications"))
        finally:
            await conn.close()
        if transactions and not inserted:
            raise RuntimeError(f"pgbench ran {transactions} replayed accepts, inserting nothing")

    def close(self) -> None:
        for server in self.servers:
            with contextlib.suppress(Exception):
                server.stop()
        for child in self.children:
            if child.poll() is None:
                child.terminate()
                try:
                    child.wait(5)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()
        self.pg.destroy()
