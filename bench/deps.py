"""Optional extras (bench/requirements.txt): install into the running venv when missing."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

REQUIREMENTS = Path(__file__).with_name("requirements.txt")
# import name -> what it gives the benchmark
OPTIONAL = {
    "psutil": "server/PostgreSQL CPU and RSS columns",
    "matplotlib": "the latency PNG",
    "procrastinate": "the peer-queue baseline",
}


def missing() -> list[str]:
    return [name for name in OPTIONAL if importlib.util.find_spec(name) is None]


def ensure(install: bool) -> list[str]:
    """Try to install what is missing (inside a venv only); return what still is."""
    absent = missing()
    in_venv = sys.prefix != sys.base_prefix
    if absent and install and in_venv:
        print(f"bench: installing {', '.join(absent)} from {REQUIREMENTS.name} ...", flush=True)
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "-r", str(REQUIREMENTS)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if proc.returncode != 0:
            print(f"bench: pip failed, continuing without: {proc.stderr.strip()[-500:]}")
        importlib.invalidate_caches()
        absent = missing()
    for name in absent:
        print(f"bench: {name} not available: no {OPTIONAL[name]}", flush=True)
    return absent
