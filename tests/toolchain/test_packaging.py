"""The built wheel is a working server on its own: it carries its schema migrations.

The suite otherwise runs from an editable install, where files next to the source tree
are always found; this test installs the wheel into a separate directory and migrates
a fresh SQLite database from there, outside the repository.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from uns_server.store.migrate import head_revision

ROOT = Path(__file__).resolve().parents[2]
PIP = (sys.executable, "-m", "pip")
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc")


def test_wheel_migrates_a_database_without_the_source_tree(tmp_path: Path) -> None:
    # Built from a copy: setuptools writes build/ and *.egg-info next to the sources.
    # The copy keeps symlinks: uns_server/migrations is a link to migrations/.
    src = tmp_path / "src"
    for tree in ("uns_server", "migrations"):
        shutil.copytree(ROOT / tree, src / tree, ignore=IGNORED, symlinks=True)
    assert (src / "uns_server" / "migrations").is_symlink()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            *PIP,
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(wheels),
            str(src),
        ],
        check=True,
        timeout=300,
    )
    [wheel] = wheels.glob("uns_server-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "uns_server/migrations/env.py" in names
    assert "uns_server/migrations/versions/0001_initial_schema.py" in names
    # The operator console's pages and its script and stylesheet.
    assert "uns_server/http/console/templates/overview.html" in names
    assert "uns_server/http/console/static/console.js" in names
    assert "uns_server/http/console/static/console.css" in names

    site = tmp_path / "site"
    subprocess.run(
        [*PIP, "install", "--quiet", "--no-deps", "--target", str(site), str(wheel)],
        check=True,
        timeout=300,
    )
    work = tmp_path / "elsewhere"
    work.mkdir()
    # The wheel's copy first on the path; the working directory is not the repository.
    env = {**os.environ, "PYTHONPATH": str(site)}
    url = f"sqlite+aiosqlite:///{work / 'uns.db'}"
    locate = subprocess.run(
        [sys.executable, "-c", "import uns_server; print(uns_server.__file__)"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(locate.stdout.strip()).is_relative_to(site)
    migrated = subprocess.run(
        [sys.executable, "-m", "uns_server.cli.admin", "--database-url", url, "migrate"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert migrated.returncode == 0, migrated.stderr
    assert migrated.stdout.strip() == head_revision()
