"""Fixtures the walkthrough tests share, and the check that none of them leaves a file
in the repository (issue 42: walkthroughs leave no untracked files in its root)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.docs import REPO_ROOT
from tests.support.postgres import free_port
from tests.support.process import ServerProcess


def files(directory: Path) -> set[str]:
    """The names in ``directory``, but the SQLite database's (its -wal and -shm files
    come and go with the server's connections)."""
    return {p.name for p in directory.iterdir() if not p.name.startswith("uns.db")}


def git_status() -> str | None:
    """``git status --porcelain`` of the repository (untracked files one by one), or
    None outside a git checkout."""
    if shutil.which("git") is None:
        return None
    done = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.stdout if done.returncode == 0 else None


@pytest.fixture(autouse=True, scope="module")
def repository_left_as_found() -> Iterator[None]:
    """Every walkthrough module leaves ``git status`` as it found it: what the guides
    write goes to a temporary directory ($OUT), what the quickstart keeps is ignored."""
    before = git_status()
    yield
    after = git_status()
    if before is not None and after is not None:
        assert after == before, f"the walkthroughs changed git status:\n{after}"


@pytest.fixture
def http_quickstart(tmp_path: Path) -> Iterator[tuple[ServerProcess, int]]:
    """The quickstart server (no configuration) with its HTTP listener on, and its port."""
    http_port = free_port()
    server = ServerProcess(tmp_path, "--http-listen", f"127.0.0.1:{http_port}")
    try:
        server.wait_serving()
        yield server, http_port
    finally:
        server.stop()
