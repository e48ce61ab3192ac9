"""Go and Rust binaries the tests run, built once and kept in a cache directory.

A binary is filed under a hash of everything its build reads (the client's source
tree, the toolchain's path and modification time, the command), so a later test of the
same run, or a later run over the same sources, takes the built file instead of
building (and linking) again; a changed source builds anew. A file lock makes workers
of ``pytest -n`` that need the same binary build it once. The cache lives in
``${UNS_TEST_BUILD_CACHE:-~/.cache/uns-test-builds}``; deleting it is always safe.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from tests.toolchain.tools import run, tool_env

# Build outputs inside the source trees, which are not sources (the producers guide's
# block builds clients/go/uns-producer in place; .gitignore lists it).
SKIPPED_DIRS = {"target", ".git", "__pycache__"}
SKIPPED_FILES = {"uns-producer"}


def cache_root() -> Path:
    base = os.environ.get("UNS_TEST_BUILD_CACHE") or str(Path.home() / ".cache" / "uns-test-builds")
    return Path(base)


def tree_digest(root: Path, *extra: str) -> str:
    """A hash of the files under ``root`` (names and contents) and of ``extra``."""
    digest = hashlib.sha256("\0".join(extra).encode())
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS)
        for name in sorted(set(filenames) - SKIPPED_FILES):
            path = Path(dirpath) / name
            if not path.is_file():
                continue
            digest.update(str(path.relative_to(root)).encode() + b"\0")
            digest.update(path.read_bytes())
    return digest.hexdigest()[:32]


def _toolchain_id(tool: str) -> str:
    stat = Path(tool).resolve().stat()
    return f"{Path(tool).resolve()}:{stat.st_mtime_ns}"


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def cached_binary(
    name: str,
    source: Path,
    tool: str,
    build: Sequence[str],
    *,
    built: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 600,
) -> Path:
    """The binary ``name`` that ``build`` (run in ``source``) writes to ``built``, or
    to ``{out}`` in its arguments when ``built`` is None (``go build -o {out}``), from
    the cache when the same sources were built before."""
    key = tree_digest(source, _toolchain_id(tool), *build)
    entry = cache_root() / name / key
    binary = entry / name
    if binary.is_file():
        return binary
    with _locked(cache_root() / name / f"{key}.lock"):
        if binary.is_file():  # another worker built it while we waited
            return binary
        entry.mkdir(parents=True, exist_ok=True)
        scratch = entry / f"{name}.partial"
        run(
            [part.replace("{out}", str(scratch)) for part in build],
            cwd=source,
            env=dict(env) if env is not None else tool_env(),
            timeout=timeout,
        )
        if built is not None:
            shutil.copy2(built, scratch)
        scratch.rename(binary)  # whole, or not there at all
    return binary
