"""``uns-admin`` in database mode only, as a real subprocess: migrations, where the
database comes from, which commands may create it, exit codes. The commands both modes
share are ``test_admin_modes.py``."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from tests.conftest import PostgresDatabases
from tests.support.admin_cli import DATABASE_LINE, admin, ok
from uns_server.store import migrate


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
async def test_migrate_prints_the_head_revision(
    dialect: str, tmp_path: Path, postgres: PostgresDatabases
) -> None:
    if dialect == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'fresh.db'}"
    else:
        url = await postgres.new(migrated=False)
    before = await admin(url, "keys", "list")
    assert before.code == 1 and "uns-admin migrate" in before.err
    migrated = ok(await admin(url, "migrate"))
    assert migrated.out.strip() == migrate.head_revision()
    assert ok(await admin(url, "migrate")).out.strip() == migrate.head_revision()  # idempotent
    ok(await admin(url, "keys", "list"))


async def test_database_url_comes_from_the_environment(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'env.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNS_")}
    env["UNS_DATABASE_URL"] = url
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "uns_server.cli.admin",
        "migrate",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=tmp_path,
    )
    out, _err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 0 and out.decode().strip() == migrate.head_revision()
    assert (tmp_path / "env.db").exists()


async def test_usage_and_failure_exit_codes(tmp_path: Path) -> None:
    usage = await admin(None)
    assert usage.code == 2 and "usage:" in usage.err
    unknown = await admin(None, "keys", "frobnicate")
    assert unknown.code == 2
    down = await admin("postgresql+asyncpg://nobody@127.0.0.1:1/uns", "keys", "list")
    assert down.code == 1 and down.out == ""
    assert len(down.messages) == 1 and "Traceback" not in down.err
    # The database it tried, without the password.
    hidden = await admin("postgresql://nobody:s3cret@127.0.0.1:1/uns", "keys", "list")
    assert f"{DATABASE_LINE}postgresql+asyncpg://nobody:***@127.0.0.1:1/uns" in hidden.err
    assert "s3cret" not in hidden.err
    bad_url = await admin("mysql://x@localhost/db", "keys", "list")
    assert bad_url.code == 2 and "--database-url" in bad_url.err


async def test_only_migrate_creates_a_database_and_each_command_names_its_own(
    tmp_path: Path,
) -> None:
    # From a directory with no database, the default ./uns.db: refused, not created.
    for command in (["keys", "list"], ["policies", "list", "demo.alert"], ["maintain"]):
        refused = await admin(None, *command, cwd=tmp_path)
        assert refused.code == 1, refused
        assert refused.out == ""
        assert refused.err.splitlines()[0] == f"{DATABASE_LINE}SQLite file {tmp_path / 'uns.db'}"
        assert refused.messages == [
            f"uns-admin: no database at {tmp_path / 'uns.db'}: give the server's "
            "--database-url (or UNS_DATABASE_URL), or create this one with `uns-admin migrate`"
        ]
        assert not (tmp_path / "uns.db").exists()
    migrated = ok(await admin(None, "migrate", cwd=tmp_path))
    assert migrated.err.splitlines()[0] == f"{DATABASE_LINE}SQLite file {tmp_path / 'uns.db'}"
    assert (tmp_path / "uns.db").exists()
    listed = ok(await admin(None, "keys", "list", cwd=tmp_path))
    assert listed.messages == [] and listed.err.startswith(DATABASE_LINE)


@pytest.mark.parametrize(
    "command",
    [
        ["uns_server.cli.admin", "--help"],
        ["uns_server.cli.admin", "policies", "list"],
        ["uns_server.cli.admin", "recipients", "list"],
        ["uns_server.cli.server", "--help"],
    ],
)
async def test_a_reader_that_leaves_ends_the_command_quietly(
    tmp_path: Path, command: list[str]
) -> None:
    """``uns-admin ... | head``: the reader closes the pipe, the command ends with status
    0 and nothing on stderr but the database line (here the reader is gone before the
    first write, so every write fails, whatever the output's size)."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'uns.db'}"
    ok(await admin(url, "migrate"))
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "notification_type: demo.alert\nspec: {channels: [log], delivery_mode: GUARANTEED}\n"
    )
    ok(await admin(url, "policies", "put", "--file", str(policy)))
    read, write = os.pipe()
    os.close(read)
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNS_")}
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            *command,
            stdout=write,
            stderr=asyncio.subprocess.PIPE,
            env={**env, "UNS_DATABASE_URL": url},
        )
    finally:
        os.close(write)
    _, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    messages = [line for line in err.decode().splitlines() if not line.startswith(DATABASE_LINE)]
    assert (proc.returncode, messages) == (0, [])
