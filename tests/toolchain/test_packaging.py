"""Both distributions build wheels that work on their own, installed as the README says.

The suite otherwise runs from an editable install, where everything next to the source
tree is found. Here the server (repository root) and the client (clients/python) are
built from a copy of the sources and installed into fresh virtualenvs, outside the
repository: the server wheel must carry the generated stubs, the client and the schema
migrations (``uns-server --help``, ``uns-admin migrate``); the client wheel the stubs and
``uns_clients`` and no server or database driver. The README's install blocks run
verbatim, with ``HOME`` in a temporary directory (pip's cache stays the real one).

Installing needs the package index (or a warm pip cache). Without one the install tests
skip, unless in CI (``CI`` set) or with ``UNS_REQUIRE_TOOLCHAINS=1``, where they fail.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support.docs import marked_block
from uns_server.store.migrate import head_revision

pytestmark = pytest.mark.timeout(900)  # a cold pip cache downloads the dependencies

ROOT = Path(__file__).resolve().parents[2]
PIP = (sys.executable, "-m", "pip")
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
# What the wheels are built from; symlinks kept (uns -> clients/python/uns,
# clients/python/uns_clients -> uns_clients, uns_server/migrations -> migrations).
TREES = ("uns_server", "migrations", "uns_clients", "clients/python")
FILES = ("pyproject.toml", "README.md")
# What a producer's environment must not get from the client distribution.
SERVER_ONLY = ["uns_server", "sqlalchemy", "asyncpg", "aiosqlite", "alembic", "aiohttp", "yaml"]
NETWORK_ERRORS = (
    "Could not find a version",
    "No matching distribution",
    "NewConnectionError",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "ConnectTimeoutError",
    "ReadTimeoutError",
    "ProxyError",
)


PROBE = f"""
import importlib.util, json
import uns_clients
from uns_clients import AsyncClient, Client, ClientConfig
from uns.v1 import notification_service_pb2_grpc, types_pb2
print(json.dumps({{
    "client_file": uns_clients.__file__,
    "importable": {{m: importlib.util.find_spec(m) is not None for m in {SERVER_ONLY!r}}},
}}))
"""


def must_run() -> bool:
    return bool(os.environ.get("CI")) or os.environ.get("UNS_REQUIRE_TOOLCHAINS") == "1"


@pytest.fixture(scope="module")
def src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the sources: setuptools writes build/ and *.egg-info next to them."""
    src = tmp_path_factory.mktemp("packaging") / "src"
    for tree in TREES:
        shutil.copytree(ROOT / tree, src / tree, ignore=IGNORED, symlinks=True)
    (src / "uns").symlink_to(os.readlink(ROOT / "uns"))
    for name in FILES:
        shutil.copy(ROOT / name, src / name)
    assert (src / "uns_server" / "migrations").is_symlink()
    assert (src / "uns" / "v1" / "types_pb2.py").is_file()
    return src


def wheel_names(project: Path, out: Path, dist: str) -> set[str]:
    subprocess.run(
        [*PIP, "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(out), "."],
        cwd=project,
        check=True,
        timeout=300,
    )
    [wheel] = out.glob(f"{dist}-*.whl")
    return set(zipfile.ZipFile(wheel).namelist())


def test_server_wheel_carries_stubs_client_and_migrations(src: Path, tmp_path: Path) -> None:
    names = wheel_names(src, tmp_path, "uns_server")
    assert "uns/v1/notification_service_pb2.py" in names
    assert "uns/v1/notification_service_pb2_grpc.py" in names
    assert "uns/v1/types_pb2.pyi" in names
    assert "uns/py.typed" in names
    assert "uns_clients/__init__.py" in names
    assert "uns_clients/py.typed" in names
    assert "uns_server/migrations/env.py" in names
    assert "uns_server/migrations/versions/0001_initial_schema.py" in names
    # The operator console's pages and its script and stylesheet.
    assert "uns_server/http/console/templates/overview.html" in names
    assert "uns_server/http/console/static/console.js" in names
    assert "uns_server/http/console/static/console.css" in names
    # Nothing of the repository's other trees.
    tops = {name.split("/")[0] for name in names}
    assert tops == {"uns", "uns_clients", "uns_server", "uns_server-0.1.0.dist-info"}


def test_client_wheel_carries_stubs_and_client_only(src: Path, tmp_path: Path) -> None:
    names = wheel_names(src / "clients" / "python", tmp_path, "uns_clients")
    assert "uns/v1/notification_service_pb2_grpc.py" in names
    assert "uns/v1/types_pb2.pyi" in names
    assert "uns_clients/__init__.py" in names
    assert "uns_clients/py.typed" in names
    tops = {name.split("/")[0] for name in names}
    assert tops == {"uns", "uns_clients", "uns_clients-0.1.0.dist-info"}


def run_readme_block(marker: str, src: Path, home: Path) -> subprocess.CompletedProcess[str]:
    """The README's ``marker`` block, verbatim, from the (copied) repository root."""
    home.mkdir(exist_ok=True)
    cache = os.environ.get("PIP_CACHE_DIR") or str(Path.home() / ".cache" / "pip")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))},
        "HOME": str(home),
        "PIP_CACHE_DIR": cache,
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", marked_block("README.md", marker)],
        cwd=src,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        output = done.stdout + done.stderr
        if any(marker in output for marker in NETWORK_ERRORS) and not must_run():
            pytest.skip(f"pip cannot reach the package index: {output.strip()[-300:]}")
        pytest.fail(f"README block {marker} failed:\n{output}")
    return done


def test_readme_server_install_gives_a_working_server(src: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    done = run_readme_block("install-server", src, home)
    assert "usage: uns-server" in done.stdout
    assert "warning" not in done.stderr.lower(), done.stderr  # a clean install says nothing
    venv = home / ".venvs" / "uns-server"
    work = tmp_path / "elsewhere"
    work.mkdir()
    # Everything comes from the venv's wheel install, not from the repository.
    locate = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-I",
            "-c",
            "import uns, uns_clients, uns_server; "
            "print(uns.__file__, uns_clients.__file__, uns_server.__file__)",
        ],
        cwd=work,
        capture_output=True,
        text=True,
        check=True,
    )
    for found in locate.stdout.split():
        assert Path(found).is_relative_to(venv / "lib"), found
    url = f"sqlite+aiosqlite:///{work / 'uns.db'}"
    migrated = subprocess.run(
        [str(venv / "bin" / "uns-admin"), "--database-url", url, "migrate"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert migrated.returncode == 0, migrated.stderr
    assert migrated.stdout.strip() == head_revision()


def test_readme_client_install_gives_the_client_alone(src: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    done = run_readme_block("install-client", src, home)
    assert "uns_clients._client.AsyncClient" in done.stdout
    venv = home / ".venvs" / "uns-producer"
    python = str(venv / "bin" / "python")
    # -I: no cwd, PYTHONPATH or user site, so only the venv's packages can be found.
    probe = subprocess.run(
        [python, "-I", "-c", PROBE],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    report = json.loads(probe.stdout)
    assert Path(report["client_file"]).is_relative_to(venv)
    assert not [m for m, found in report["importable"].items() if found]
    listed = subprocess.run(
        [python, "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    installed = {d["name"].lower().replace("_", "-") for d in json.loads(listed.stdout)}
    assert {"uns-clients", "grpcio", "grpcio-status", "protobuf", "tenacity"} <= installed
    assert not installed & {"sqlalchemy", "asyncpg", "aiosqlite", "alembic", "uns-server"}
