"""A throwaway pgbouncer on loopback in front of a ``PostgresProcess``: Debian's
``pgbouncer`` package (1.18 here: no prepared-statement support in transaction mode).

Without the binary the tests that need it skip (unless
``UNS_REQUIRE_TOOLCHAINS=1``: then they fail; ``scripts/install-tools.sh`` installs it).
The configuration is docs/deployment.md's pgbouncer.ini excerpt with loopback
addresses, test paths and ``auth_type = trust`` (the test PostgreSQL trusts loopback).
"""

from __future__ import annotations

import configparser
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support.docs import marked_block
from tests.support.postgres import SYSTEM_USER, PostgresProcess, free_port
from tests.toolchain.tools import INSTALL_HINT, search_path, skip_or_fail

START_TIMEOUT_SECONDS = 30.0


def pgbouncer_binary() -> str:
    """The pgbouncer executable, or skip (fail with ``UNS_REQUIRE_TOOLCHAINS=1``)."""
    found = shutil.which("pgbouncer", path=f"{search_path()}{os.pathsep}/usr/sbin")
    if found is None:
        skip_or_fail(f"pgbouncer not found (Debian's pgbouncer package): {INSTALL_HINT}")
        raise AssertionError("unreachable")  # skip_or_fail always raises
    return found


def documented_ini() -> configparser.ConfigParser:
    """docs/deployment.md's pgbouncer.ini excerpt, parsed: the settings users copy."""
    ini = configparser.ConfigParser(interpolation=None)
    ini.optionxform = str  # type: ignore[assignment,method-assign]  # keep keys' case
    ini.read_string(marked_block("docs/deployment.md", "pgbouncer-ini", "ini"))
    return ini


class PgBouncer:
    """pgbouncer in ``pool_mode`` (``transaction`` or ``session``) for every database of
    ``postgres``; ``url(database)`` is a URL through it."""

    def __init__(self, postgres: PostgresProcess, *, pool_mode: str = "transaction") -> None:
        self.binary = pgbouncer_binary()
        self.postgres = postgres
        self.pool_mode = pool_mode
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="uns-pgbouncer-"))
        self.log = self.root / "pgbouncer.log"
        self.ini = self.root / "pgbouncer.ini"
        (self.root / "userlist.txt").write_text('"postgres" ""\n')
        ini = documented_ini()
        ini["databases"] = {"*": f"host=127.0.0.1 port={postgres.port}"}
        ini["pgbouncer"].update(
            {
                "listen_addr": "127.0.0.1",
                "listen_port": str(self.port),
                "unix_socket_dir": str(self.root),
                "auth_type": "trust",
                "auth_file": str(self.root / "userlist.txt"),
                "pool_mode": pool_mode,
                "logfile": str(self.log),
                "pidfile": str(self.root / "pgbouncer.pid"),
            }
        )
        with self.ini.open("w") as f:
            ini.write(f)
        self._user: str | None = None
        if os.geteuid() == 0:  # pgbouncer refuses to run as root, like PostgreSQL
            self._user = SYSTEM_USER
            os.chmod(self.root, 0o777)
            for path in self.root.iterdir():
                os.chmod(path, 0o666)
        self.proc: subprocess.Popen[bytes] | None = None

    def url(self, database: str) -> str:
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        cmd = [self.binary, str(self.ini)]
        if self._user:
            cmd = ["runuser", "-u", self._user, "--", *cmd]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        self.stop()
        log = self.log.read_text() if self.log.exists() else "(no log)"
        raise RuntimeError(f"pgbouncer did not start; log:\n{log}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
