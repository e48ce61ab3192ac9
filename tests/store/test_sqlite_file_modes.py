"""The SQLite database and its WAL/SHM files are private (0600) when UNS creates them,
whatever the umask: they hold every tenant's notifications and key hashes."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.server import send_request, start_server


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    previous = os.umask(0o022)  # the common default, under which files are 0644
    try:
        yield
    finally:
        os.umask(previous)


@pytest.mark.usefixtures("permissive_umask")
async def test_a_new_sqlite_database_and_its_wal_and_shm_files_are_0600(tmp_path: Path) -> None:
    path = tmp_path / "fresh" / "uns.db"
    path.parent.mkdir()
    server = await start_server(f"sqlite:///{path}", tmp_path)
    try:
        await server.stub("alice").SendNotification(send_request(idempotency_key="private"))
        files = [path, Path(f"{path}-wal"), Path(f"{path}-shm")]
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in files}
    finally:
        await server.stop()
    assert modes == {"uns.db": 0o600, "uns.db-wal": 0o600, "uns.db-shm": 0o600}
