"""The setup scripts a newcomer runs first: ``scripts/bootstrap`` installs the server
alone for ``scripts/serve`` and the development tools for ``scripts/test``, saying what
it does; ``scripts/install-tools.sh grpcurl`` installs that one tool and says where.

The bootstrap runs on a copy of the script beside the two pyproject files, with a
stand-in ``.venv/bin/python`` that records the pip commands it is given (the real
installs are ``test_packaging.py``'s).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.toolchain.tools import REPO_ROOT, find_tool, tool_env, tools_bin

FAKE_PYTHON = """#!/usr/bin/env bash
echo "$*" >> "$(dirname "$0")/../../pip.log"
"""


def fake_checkout(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    (root / "clients" / "python").mkdir(parents=True)
    shutil.copy(REPO_ROOT / "scripts" / "bootstrap", root / "scripts" / "bootstrap")
    shutil.copy(REPO_ROOT / "pyproject.toml", root / "pyproject.toml")
    shutil.copy(
        REPO_ROOT / "clients" / "python" / "pyproject.toml",
        root / "clients" / "python" / "pyproject.toml",
    )
    python = root / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    return root


def bootstrap(root: Path, *args: str) -> tuple[list[str], str]:
    """The pip commands one run gave, and what it said."""
    log = root / "pip.log"
    log.unlink(missing_ok=True)
    done = subprocess.run(
        [str(root / "scripts" / "bootstrap"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return (log.read_text().splitlines() if log.exists() else []), done.stderr


def test_serving_installs_the_server_alone_and_testing_adds_the_dev_tools(
    tmp_path: Path,
) -> None:
    root = fake_checkout(tmp_path)
    pip, said = bootstrap(root, "--serve")
    assert [c for c in pip if "install" in c and "-e" in c] == [
        "-m pip install -q --disable-pip-version-check -e ."
    ], pip
    assert "installing uns-server and what it needs to serve" in said
    assert "installed in" in said
    assert bootstrap(root, "--serve") == ([], "")  # nothing to do, nothing said
    pip, said = bootstrap(root)  # scripts/test: the [dev] extra on top
    assert "-m pip install -q --disable-pip-version-check -e .[dev]" in pip, pip
    assert "development tools" in said
    assert bootstrap(root) == ([], "")
    assert bootstrap(root, "--serve") == ([], "")  # a dev install serves too
    # A changed pyproject.toml installs again.
    with (root / "pyproject.toml").open("a") as f:
        f.write("\n# changed\n")
    pip, _ = bootstrap(root, "--serve")
    assert "-m pip install -q --disable-pip-version-check -e ." in pip


def test_the_scripts_ask_for_what_they_need() -> None:
    scripts = REPO_ROOT / "scripts"
    assert "scripts/bootstrap --serve" in (scripts / "serve").read_text()
    for dev in (scripts / "test", REPO_ROOT / ".ci" / "run"):
        lines = [line.strip() for line in dev.read_text().splitlines()]
        assert "scripts/bootstrap" in lines, dev  # the dev install, no --serve


def test_install_tools_installs_grpcurl_alone_and_says_where() -> None:
    find_tool("go")
    done = subprocess.run(
        [str(REPO_ROOT / "scripts" / "install-tools.sh"), "grpcurl"],
        env=tool_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    where = tools_bin() / "grpcurl"
    assert f"install-tools: grpcurl is {where}" in done.stdout
    assert where.is_file()
    others = ("buf", "pip", "chromium", "ghz", "cargo", "apt-get")
    assert not [line for line in done.stdout.splitlines() if any(o in line for o in others)]
    unknown = subprocess.run(
        [str(REPO_ROOT / "scripts" / "install-tools.sh"), "no-such-tool"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert unknown.returncode == 64 and "one of:" in unknown.stderr
