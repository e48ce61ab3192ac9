"""``uns-admin`` as a real process of its own (the in-process server keeps serving), with a clean
``UNS_*`` environment, in database mode (``--database-url``) or remote mode
(``--target``); ``AdminCli`` runs the same command in either, for the suites that test
one behaviour in both."""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tests.support.admin_fork import AdminForker
from tests.support.server import KEYS, RunningServer

DATABASE_LINE = "uns-admin: database "

Mode = Literal["database", "remote"]
MODES: tuple[Mode, ...] = ("database", "remote")


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def messages(self) -> list[str]:
        """stderr without the ``uns-admin: database ...`` line every database command
        prints first."""
        return [line for line in self.err.splitlines() if not line.startswith(DATABASE_LINE)]


# uns-admin forked from a warm interpreter (tests/support/admin_fork.py): the same
# process boundary without ~2.5 s of imports per command. UNS_TEST_ADMIN_FORK=0 starts
# ``python -m uns_server.cli.admin`` afresh for each instead.
FORKER = AdminForker() if hasattr(os, "fork") else None


async def run_admin(*args: str, api_key: str | None = None, cwd: Path | None = None) -> Result:
    """``python -m uns_server.cli.admin *args``, with ``api_key`` as ``UNS_API_KEY``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNS_")}
    if api_key is not None:
        env["UNS_API_KEY"] = api_key
    if FORKER is not None and os.environ.get("UNS_TEST_ADMIN_FORK") != "0":
        with tempfile.TemporaryDirectory(prefix="uns-admin-") as directory:
            out, err = Path(directory) / "stdout", Path(directory) / "stderr"
            done = FORKER.submit(list(args), env, cwd or Path.cwd(), out, err)
            code = await asyncio.wait_for(asyncio.wrap_future(done), timeout=60)
            return Result(code, out.read_text("utf-8"), err.read_text("utf-8"))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "uns_server.cli.admin",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=cwd,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return Result(proc.returncode, out.decode(), err.decode())


async def admin(db_url: str | None, *args: str, cwd: Path | None = None) -> Result:
    """Database mode; with no URL, the default (``UNS_DATABASE_URL`` unset: ./uns.db)."""
    url = ["--database-url", db_url] if db_url is not None else []
    return await run_admin(*url, *args, cwd=cwd)


async def remote(server: RunningServer, who: str, *args: str) -> Result:
    """Remote mode against ``server`` with ``who``'s key (from the environment, as an
    operator's shell would have it)."""
    return await run_admin("--target", server.target, *args, api_key=KEYS[who])


def ok(result: Result) -> Result:
    assert result.code == 0, result
    assert "Traceback" not in result.err, result
    return result


@dataclass
class AdminCli:
    """One mode of ``uns-admin`` on one database, with a server running on it (so a
    test checks what the server makes of what either mode wrote)."""

    mode: Mode
    server: RunningServer
    db_url: str

    async def __call__(self, *args: str, who: str = "oscar") -> Result:
        """The command in this mode; ``who`` is the caller's key in remote mode (the
        database mode has no caller)."""
        if self.mode == "database":
            return await admin(self.db_url, *args)
        return await remote(self.server, who, *args)

    def other(self) -> AdminCli:
        """The other mode on the same database and server, to compare outputs."""
        other: Mode = "remote" if self.mode == "database" else "database"
        return AdminCli(other, self.server, self.db_url)

    def wrote(self, created_by: str) -> bool:
        """Whether ``created_by``/``updated_by`` names this mode's writer: the operating
        system user on the database, the key's principal (oscar) over the server."""
        if self.mode == "database":
            return created_by.startswith("uns-admin:")
        return created_by == "oscar"
