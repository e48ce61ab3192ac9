"""``--profile``: sample the uns-server process with py-spy while the UNS workloads run.

py-spy attaches to the running server (no change to it) and writes collapsed stacks
(``--format raw``, which flamegraph.pl and speedscope read). It samples only the thread
holding the GIL (``--gil``): without that, a thread waiting to take the GIL back after
a socket ``send`` shows up as time in ``send`` and hides where the interpreter really
works. Time inside C extensions (grpc's Cython callbacks, asyncpg's protocol) appears as
the Python frame that called them, typically ``Handle._run``. We print the top frames by own and by
inclusive samples. Figures measured in a profiled run are perturbed (sampling costs
CPU on a 2-core machine): profile in a separate run from the one you quote.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

SAMPLE_RATE_HZ = 200
_LOCATION = re.compile(r" \((?P<file>[^:()]+):(?P<line>\d+)\)$")


def py_spy() -> str | None:
    candidate = Path(sys.executable).with_name("py-spy")
    return str(candidate) if candidate.exists() else shutil.which("py-spy")


class Sampler:
    def __init__(self, pid: int, out_dir: Path, label: str) -> None:
        exe = py_spy()
        if exe is None:
            raise RuntimeError("py-spy is not installed (pip install py-spy)")
        self.raw = out_dir / f"profile-{label}.txt"
        self._log = (out_dir / f"py-spy-{label}.log").open("wb")
        self._proc = subprocess.Popen(
            [exe, "record", "--pid", str(pid), "--rate", str(SAMPLE_RATE_HZ),
             "--format", "raw", "--output", str(self.raw), "--nonblocking", "--gil"],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip

    def stop(self) -> None:
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGINT)
            try:
                self._proc.wait(30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._log.close()


def _short(frame: str) -> str:
    match = _LOCATION.search(frame)
    if not match:
        return frame
    path = match["file"]
    for marker in ("site-packages/", "uns_server/", "lib/python3"):
        if marker in path:
            path = path[path.index(marker) :]
            break
    return f"{frame[: match.start()]} ({path}:{match['line']})"


def _uns_frame(frame: str) -> str | None:
    """``Intake.send (uns_server/services/intake.py)`` for a server frame, else None."""
    match = _LOCATION.search(frame)
    if not match or "uns_server/" not in match["file"]:
        return None
    path = match["file"][match["file"].index("uns_server/") :]
    return f"{frame[: match.start()]} ({path})"


def summarize(raw: Path, top: int = 15) -> dict[str, list[tuple[str, float]]]:
    """Top frames by own samples, and uns_server functions by inclusive samples (%).

    SQLAlchemy runs database calls in greenlets, which py-spy reports as separate
    stacks: their samples count in ``own`` but cannot be charged to a server caller.
    """
    own: Counter[str] = Counter()
    server: Counter[str] = Counter()
    total = 0
    if not raw.exists():
        return {"own": [], "server": []}
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [f for f in stack.split(";") if f]
        if not frames:
            continue
        total += count
        own[_short(frames[-1])] += count
        for name in {n for n in map(_uns_frame, frames) if n}:
            server[name] += count
    if not total:
        return {"own": [], "server": []}
    skip = ("main (uns_server/cli/", "<module> (uns_server/cli/", "serve (uns_server/cli/")
    return {
        "own": [(f, 100 * c / total) for f, c in own.most_common(top)],
        "server": [
            (f, 100 * c / total)
            for f, c in server.most_common(top + len(skip))
            if not f.startswith(skip)
        ][:top],
    }


def render(summary: dict[str, list[tuple[str, float]]]) -> str:
    lines = [
        "Server hotspots (py-spy --gil, % of GIL-holding samples):",
        "  own time (leaf frames):",
    ]
    lines += [f"    {pct:5.1f}%  {frame}" for frame, pct in summary["own"]]
    lines.append("  uns_server functions, inclusive (greenlet-run SQL not attributed):")
    lines += [f"    {pct:5.1f}%  {frame}" for frame, pct in summary["server"]]
    return "\n".join(lines)
