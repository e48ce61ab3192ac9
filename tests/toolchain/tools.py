"""Finding the code-generation and client toolchains from tests.

Tools are looked up on ``PATH`` plus ``${UNS_TOOLS_DIR:-$HOME/.cache/uns-tools}/bin``
(where ``scripts/install-tools.sh`` puts them). A missing tool skips the test,
unless ``UNS_REQUIRE_TOOLCHAINS=1`` (CI), where it fails it instead, so a
machine without the tools cannot pass silently.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PYTHON_CLIENT_DIR = REPO_ROOT / "clients" / "python"
GO_CLIENT_DIR = REPO_ROOT / "clients" / "go"
RUST_CLIENT_DIR = REPO_ROOT / "clients" / "rust"

INSTALL_HINT = "run scripts/install-tools.sh"


def tools_bin() -> Path:
    """The directory scripts/install-tools.sh installs into."""
    base = os.environ.get("UNS_TOOLS_DIR") or str(Path.home() / ".cache" / "uns-tools")
    return Path(base) / "bin"


def search_path() -> str:
    """``PATH`` with the tools directory appended (an explicit PATH entry wins)."""
    return os.pathsep.join(p for p in (os.environ.get("PATH", ""), str(tools_bin())) if p)


def toolchains_required() -> bool:
    return os.environ.get("UNS_REQUIRE_TOOLCHAINS") == "1"


def skip_or_fail(message: str) -> None:
    """Skips the calling test, or fails it when UNS_REQUIRE_TOOLCHAINS=1."""
    if toolchains_required():
        pytest.fail(f"{message} (UNS_REQUIRE_TOOLCHAINS=1)", pytrace=False)
    pytest.skip(message)


def find_tool(name: str) -> str:
    """Absolute path of executable ``name``; skips or fails the test when absent."""
    path = shutil.which(name, path=search_path())
    if path is None:
        skip_or_fail(f"{name} not found: {INSTALL_HINT}")
        raise AssertionError("unreachable")  # skip_or_fail always raises
    return path


def find_tools(*names: str) -> dict[str, str]:
    """``find_tool`` for several names at once."""
    return {name: find_tool(name) for name in names}


def require_module(name: str) -> ModuleType:
    """Imports Python module ``name``; skips or fails the test when absent."""
    if importlib.util.find_spec(name) is None:
        skip_or_fail(f"python module {name} not found: {INSTALL_HINT}")
    return importlib.import_module(name)


def tool_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The process environment with the tools directory on PATH, plus ``extra``.

    ``PYTHON`` (read by the scripts/ codegen wrappers) defaults to the
    interpreter running the tests, which has grpcio-tools and mypy-protobuf.
    """
    env = dict(os.environ)
    env.setdefault("PYTHON", sys.executable)
    env["PATH"] = os.pathsep.join(p for p in (str(tools_bin()), env.get("PATH", "")) if p)
    env.update(extra or {})
    return env


def run(
    cmd: Sequence[str],
    *,
    cwd: Path = REPO_ROOT,
    env: Mapping[str, str] | None = None,
    timeout: float = 600,
) -> subprocess.CompletedProcess[str]:
    """Runs ``cmd`` and fails the test, showing its output, unless it exits 0."""
    proc = subprocess.run(
        list(cmd),
        cwd=cwd,
        env=dict(env) if env is not None else tool_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(
            f"`{' '.join(cmd)}` in {cwd} exited {proc.returncode}\n"
            f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}",
            pytrace=False,
        )
    return proc
