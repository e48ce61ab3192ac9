"""A throwaway pgbouncer on loopback in front of a ``PostgresProcess``: Debian's
``pgbouncer`` package (1.18 here: no prepared-statement support in transaction mode).

``PgBouncer.find()`` is None when the binary is missing (tests skip, unless
``UNS_REQUIRE_TOOLCHAINS=1``: then they fail; ``scripts/install-tools.sh`` installs it).
The configuration is the one docs/deployment.md shows, sized for tests.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.support.postgres import SYSTEM_USER, PostgresProcess, free_port

START_TIMEOUT_SECONDS = 30.0
BINARY_PLACES = ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer")


def pgbouncer_binary() -> str:
    """The pgbouncer executable, or skip (fail with ``UNS_REQUIRE_TOOLCHAINS=1``)."""
    found = shutil.which("pgbouncer") or next(
        (p for p in BINARY_PLACES if os.access(p, os.X_OK)), None
    )
    if found:
        return found
    message = "pgbouncer is not installed (scripts/install-tools.sh, Debian's pgbouncer)"
    if os.environ.get("UNS_REQUIRE_TOOLCHAINS") == "1":
        pytest.fail(message)
    pytest.skip(message)


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
        self.ini.write_text(
            "[databases]\n"
            f"* = host=127.0.0.1 port={postgres.port}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            f"unix_socket_dir = {self.root}\n"
            "auth_type = trust\n"
            f"auth_file = {self.root / 'userlist.txt'}\n"
            f"pool_mode = {pool_mode}\n"
            "max_client_conn = 500\n"
            "default_pool_size = 10\n"
            # pgbouncer's own bound on a transaction left idle (the server's setting
            # cannot travel as a startup parameter through it).
            "idle_transaction_timeout = 10\n"
            # What UNS sends when it does not know it is pooled (the setting unset):
            # accepted and dropped, so the NOTIFY self-test is what speaks.
            "ignore_startup_parameters = idle_in_transaction_session_timeout\n"
            f"logfile = {self.log}\n"
            f"pidfile = {self.root / 'pgbouncer.pid'}\n"
        )
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
