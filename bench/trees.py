"""Source trees a bench run measures: the one it runs from, and ``--before REV``'s.

A before/after pair runs two uns-server children from one venv (this one), each
importing its code from its own tree. The venv holds an editable install of the
current tree, but setuptools' editable finder is appended to ``sys.meta_path``, after
the path finder, so a tree on ``PYTHONPATH`` wins over it. ``python -m`` and ``-c``
also put the working directory first on ``sys.path``, so a child runs in its tree's
root. Every server child reports which ``uns_server`` (and generated ``uns`` stubs) it
really imported (``LAUNCH``), and the pair refuses a child that loaded the wrong tree.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STUBS = Path("clients") / "python"  # the generated ``uns`` package, beside uns_clients
MARKER = "bench-child: "  # the line a server child writes first (LAUNCH)
# The server child: report the modules it imported, then run uns-server's main.
LAUNCH = (
    "import sys, uns_server, uns.v1.notification_service_pb2 as pb; "
    f"print({MARKER!r} + 'uns_server=' + uns_server.__file__ + '\\tuns=' + pb.__file__, "
    "file=sys.stderr, flush=True); "
    "from uns_server.cli.server import main; main()"
)


@dataclass(frozen=True)
class Tree:
    """A source tree servers and ``uns-admin`` import from; ``label`` names it in rows."""

    label: str  # "before" or "after"
    root: Path
    revision: str  # commit (with "-dirty" for uncommitted changes) or the path given
    # Trees inside this one that are not it: the before tree exported into a run
    # directory under bench/results is inside the current tree.
    nested: tuple[Path, ...] = ()

    def env(self) -> dict[str, str]:
        """PYTHONPATH for a child importing from this tree first."""
        paths = [str(self.root), str(self.root / STUBS)]
        inherited = os.environ.get("PYTHONPATH")
        return {"PYTHONPATH": os.pathsep.join([*paths, *([inherited] if inherited else [])])}

    def owns(self, module_file: str) -> bool:
        path = Path(module_file).resolve()
        return path.is_relative_to(self.root.resolve()) and not any(
            path.is_relative_to(inner.resolve()) for inner in self.nested
        )


def _git(*args: str, cwd: Path = ROOT) -> str:
    proc = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def _describe(root: Path) -> str:
    """Short commit of a checkout, "-dirty" when it has uncommitted changes."""
    try:
        if Path(_git("rev-parse", "--show-toplevel", cwd=root)).resolve() != root.resolve():
            return str(root)  # not a checkout of its own (inside another one, say)
        commit = _git("rev-parse", "--short=12", "HEAD", cwd=root)
        dirty = _git("status", "--porcelain", "--untracked-files=no", cwd=root)
    except (RuntimeError, OSError):
        return str(root)
    return commit + ("-dirty" if dirty else "")


def current(before: Tree | None = None) -> Tree:
    """The tree this bench runs from: the code under test, "after" (not ``before``,
    should that lie inside it)."""
    return Tree("after", ROOT, _describe(ROOT), (before.root,) if before else ())


@contextlib.contextmanager
def materialise(spec: str, run_dir: Path) -> Iterator[Tree]:
    """The "before" tree: a directory as given, or a git revision exported (``git
    archive``, which leaves the repository and its worktrees untouched) into the run
    directory and removed again on exit."""
    given = Path(spec).expanduser()
    if given.is_dir():
        root = given.resolve()
        if not (root / "uns_server" / "__init__.py").is_file():
            raise RuntimeError(f"--before {spec}: no uns_server package in that directory")
        yield Tree("before", root, _describe(root))
        return
    commit = _git("rev-parse", "--verify", f"{spec}^{{commit}}")
    root = run_dir / f"before-{commit[:12]}"
    archive = subprocess.run(
        ["git", "archive", "--format=tar", commit],
        cwd=ROOT,
        capture_output=True,
        timeout=120,
        check=True,
    ).stdout
    root.mkdir(parents=True)
    try:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(root, filter="data")
        yield Tree("before", root, commit[:12])
    finally:
        shutil.rmtree(root, ignore_errors=True)


def loaded_modules(log_text: str) -> dict[str, str]:
    """What a server child reported it imported (``LAUNCH``): {"uns_server": file, ...}."""
    for line in log_text.splitlines():
        if line.startswith(MARKER):
            parts = (part.partition("=") for part in line.removeprefix(MARKER).split("\t"))
            return {name: value for name, _, value in parts if value}
    return {}
