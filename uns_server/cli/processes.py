"""``uns-server --processes N``: one supervisor and N serving children on one host.

The supervisor serves nothing itself. It holds the gRPC and HTTP addresses first
(``api.bind.reserve``): an address another process holds is refused with the same
message a single server gives, unless ``--reuse-port`` asks to share it, and
``HOST:0`` becomes one port for every child. Then it starts N children, each a whole
``uns-server`` (``cli.server.child_main``) with ``reuse_port`` on: its own event loop,
database pool, LISTEN connection, dispatcher, hub and request budgets, the kernel
spreading new connections between them (``SO_REUSEPORT``). Nothing is shared in
memory; what must hold across them holds across replicas on one PostgreSQL already
(docs/deployment.md, "Several processes per host").

A child that dies is started again in its slot (at once after a long run, with a
doubling delay when it keeps dying young); a child that exits 2 (a configuration that
can never work, e.g. its port taken) stops them all, and the supervisor exits 2.
SIGTERM or SIGINT drains every child (each its own SIGTERM drain) and exits 0 once all
of them exited 0. Children read their settings from a pipe that stays open: if the
supervisor is killed, they see the pipe close and drain.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uns_server
from uns_server.api.bind import Reservation, ReservationError, reserve
from uns_server.app.http_surface import DEV_LINK_KEY_FILE, dev_link_key
from uns_server.settings import Settings

log = logging.getLogger("uns.supervisor")

CHILD_LAUNCH = "from uns_server.cli.server import child_main; child_main()"
# The children run the code this supervisor runs, wherever it was imported from.
CODE_ROOT = str(Path(uns_server.__file__).resolve().parents[1])
CONFIG_ERROR = 2
# A child that served this long before it died is restarted at once; one that dies
# younger waits RESTART_FIRST_SECONDS, doubling with each young death up to the most.
HEALTHY_RUN_SECONDS = 30.0
RESTART_FIRST_SECONDS = 0.5
RESTART_MOST_SECONDS = 30.0
# A child's drain: the writers' grace, then in-flight calls' grace, then the HTTP
# listener and telemetry flush (a few seconds each). Past this it is killed.
STOP_MARGIN_SECONDS = 15.0


@dataclass
class _Slot:
    """Child ``index``: the process in it now, and how young its last ones died."""

    index: int
    proc: asyncio.subprocess.Process | None = None
    started: float = 0.0
    young_deaths: int = 0
    drained: bool = False  # sent SIGTERM by the drain

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None


class Supervisor:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._slots = [_Slot(i) for i in range(settings.processes)]
        self._reservations: list[Reservation] = []
        self._child_settings: dict[str, Any] = {}
        self._stopping = asyncio.Event()
        self._fatal = False
        self._host = socket.gethostname()

    async def run(self) -> int:
        """Until SIGTERM/SIGINT (0 once every child drained cleanly, else 1), or until a
        child cannot ever start (2)."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stopping.set)
        try:
            self._child_settings = self._hold_addresses()
        except ReservationError as exc:
            log.critical("cannot start: %s", exc)
            print(f"uns-server: {exc}", file=sys.stderr, flush=True)
            return CONFIG_ERROR
        try:
            return await self._supervise()
        finally:
            for reservation in self._reservations:
                reservation.close()

    def _hold_addresses(self) -> dict[str, Any]:
        """The children's settings: this one's, on the held addresses, sharing them."""
        s = self.settings
        grpc_address = reserve(s.listen, join=s.reuse_port, flag="--listen (UNS_LISTEN)")
        self._reservations.append(grpc_address)
        changes: dict[str, Any] = {
            "processes": 1,
            "reuse_port": True,
            "listen": grpc_address.address,
        }
        if s.http_enabled:
            http = reserve(
                s.http_listen,
                join=s.reuse_port,
                flag="--http-listen (UNS_HTTP_LISTEN)",
                what="HTTP",
            )
            self._reservations.append(http)
            changes["http_listen"] = http.address
            if not s.link_keys:  # loopback only: one dev link key, or links fail elsewhere
                path = Path(s.dev_key_file).with_name(DEV_LINK_KEY_FILE)
                changes["action_link_keys"] = dev_link_key(path)
        children = dataclasses.asdict(dataclasses.replace(s, **changes))
        log.info(
            "supervising",
            extra={
                "processes": s.processes,
                "listen": grpc_address.address,
                "http_listen": changes.get("http_listen", ""),
            },
        )
        print(
            f"uns-server supervising {s.processes} processes on {grpc_address.address}",
            file=sys.stderr,
            flush=True,
        )
        return children

    def _settings_for(self, index: int) -> dict[str, Any]:
        """Child ``index``'s settings: metrics on PORT+index (each child has its own)."""
        values = dict(self._child_settings)
        host, _, port = self.settings.metrics_listen.rpartition(":")
        if self.settings.metrics_listen and int(port):
            values["metrics_listen"] = f"{host}:{int(port) + index}"
        return values

    async def _supervise(self) -> int:
        keepers = [asyncio.create_task(self._keep(slot)) for slot in self._slots]
        await self._stopping.wait()
        clean = await self._drain(keepers)
        if self._fatal:
            return CONFIG_ERROR
        log.info("stopped", extra={"clean": clean})
        return 0 if clean else 1

    async def _keep(self, slot: _Slot) -> None:
        """Keep a child running in ``slot`` until the supervisor stops."""
        while not self._stopping.is_set():
            proc = await self._spawn(slot)
            code = await proc.wait()
            if self._stopping.is_set():
                return
            if code == CONFIG_ERROR:
                log.critical(
                    "a child cannot start (exit status 2, see its message): stopping all",
                    extra={"child": slot.index, "pid": proc.pid},
                )
                self._fatal = True
                self._stopping.set()
                return
            delay = self._restart_delay(slot)
            log.error(
                "child exited; restarting",
                extra={
                    "child": slot.index,
                    "pid": proc.pid,
                    "exit_code": code,
                    "restart_in_seconds": delay,
                },
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)

    def _restart_delay(self, slot: _Slot) -> float:
        if time.monotonic() - slot.started >= HEALTHY_RUN_SECONDS:
            slot.young_deaths = 0
            return 0.0
        slot.young_deaths += 1
        delay: float = RESTART_FIRST_SECONDS * 2.0 ** (slot.young_deaths - 1)
        return min(delay, RESTART_MOST_SECONDS)

    async def _spawn(self, slot: _Slot) -> asyncio.subprocess.Process:
        path = os.pathsep.join(p for p in (CODE_ROOT, os.environ.get("PYTHONPATH")) if p)
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            CHILD_LAUNCH,
            stdin=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": path},
        )
        spec = {"child": slot.index, "host": self._host, "settings": self._settings_for(slot.index)}
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(spec).encode() + b"\n")  # the pipe stays open
        with contextlib.suppress(ConnectionError):  # died at once: its exit tells why
            await proc.stdin.drain()
        slot.proc, slot.started, slot.drained = proc, time.monotonic(), False
        log.info("child started", extra={"child": slot.index, "pid": proc.pid})
        return proc

    async def _drain(self, keepers: list[asyncio.Task[None]]) -> bool:
        """SIGTERM every child (also one spawned meanwhile), wait for their drains,
        kill what outlives them. True when every child drained and exited 0."""
        s = self.settings
        log.info("draining children", extra={"grace_seconds": s.shutdown_grace_seconds})
        deadline = time.monotonic() + 2 * s.shutdown_grace_seconds + STOP_MARGIN_SECONDS
        clean = True
        pending = set(keepers)
        while pending and time.monotonic() < deadline:
            for slot in self._slots:
                if slot.running and not slot.drained:
                    assert slot.proc is not None
                    slot.drained = True
                    with contextlib.suppress(ProcessLookupError):
                        slot.proc.send_signal(signal.SIGTERM)
            _done, pending = await asyncio.wait(pending, timeout=0.1)
        for slot in self._slots:
            if slot.running:
                assert slot.proc is not None
                log.error("child did not drain in time: killed", extra={"child": slot.index})
                with contextlib.suppress(ProcessLookupError):
                    slot.proc.kill()
                await slot.proc.wait()
                clean = False
            elif slot.proc is not None and slot.drained and slot.proc.returncode != 0:
                clean = False
        for keeper in keepers:
            keeper.cancel()
        await asyncio.gather(*keepers, return_exceptions=True)
        return clean
