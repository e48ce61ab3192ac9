"""ghz (github.com/bojand/ghz), a Go gRPC load generator nobody here wrote.

It runs in a process of its own, so the server's CPU per call (read from /proc by
``CpuMeter``) carries none of the load generator's work, and the load generator's
speed does not depend on the Python client. Its own CPU is read from this process's
reaped-children usage around each run, for the "gen CPU" column.

ghz learns the schema from a protoset the bench writes from the generated Python
descriptors (the same bytes reflection serves), so no reflection request falls
inside a measured window and the echo baseline needs no reflection service;
tests/acceptance/test_reflection_tools.py drives ghz through reflection instead.

The binary is found on PATH or in the tools directory (scripts/install-tools.sh);
when absent and ``go`` is on PATH, the bench installs the version pinned in
scripts/install-tools.sh from the Go module proxy.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import resource
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import FileDescriptor

from bench.harness import API_KEY
from uns.v1 import notification_service_pb2

ROOT = Path(__file__).resolve().parents[1]
INSTALL_SCRIPT = ROOT / "scripts" / "install-tools.sh"
MODULE = "github.com/bojand/ghz/cmd/ghz"
METHOD = "uns.v1.NotificationService.SendNotification"
CALL_TIMEOUT = "30s"
INSTALL_TIMEOUT_SECONDS = 900.0


def tools_bin() -> Path:
    base = os.environ.get("UNS_TOOLS_DIR") or str(Path.home() / ".cache" / "uns-tools")
    return Path(base) / "bin"


def pinned_version() -> str:
    """``GHZ_VERSION`` from scripts/install-tools.sh: one pin for tests and the bench."""
    match = re.search(r"^GHZ_VERSION=(\S+)", INSTALL_SCRIPT.read_text(), re.M)
    if match is None:
        raise RuntimeError(f"no GHZ_VERSION in {INSTALL_SCRIPT}")
    return match.group(1)


def find() -> str | None:
    search = os.pathsep.join(p for p in (os.environ.get("PATH", ""), str(tools_bin())) if p)
    return shutil.which("ghz", path=search)


def locate(install: bool) -> str | None:
    """The ghz binary; installs the pinned one with ``go install`` when allowed."""
    found = find()
    if found is not None or not install or shutil.which("go") is None:
        return found
    version = pinned_version()
    print(f"bench: installing ghz {version} (go install {MODULE}) ...", flush=True)
    proc = subprocess.run(
        ["go", "install", f"{MODULE}@{version}"],
        env={**os.environ, "GOBIN": str(tools_bin())},
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_SECONDS,
    )
    if proc.returncode != 0:
        print(f"bench: go install ghz failed: {proc.stderr.strip()[-500:]}", flush=True)
    return find()


def write_protoset(path: Path) -> Path:
    """A FileDescriptorSet of notification_service.proto and its imports, imports first."""
    files: dict[str, FileDescriptor] = {}

    def add(file: FileDescriptor) -> None:
        for dependency in file.dependencies:
            if dependency.name not in files:
                add(dependency)
        files[file.name] = file

    add(notification_service_pb2.DESCRIPTOR)
    descriptor_set = descriptor_pb2.FileDescriptorSet()
    for file in files.values():
        file.CopyToProto(descriptor_set.file.add())
    path.write_bytes(descriptor_set.SerializeToString())
    return path


def send_request(notification_type: str, key_prefix: str) -> dict[str, Any]:
    """bench.client.send_request as ghz call data; ghz fills ``{{.RequestNumber}}`` per
    call, so each call has its own idempotency key (and correlation id)."""
    key = key_prefix + "{{.RequestNumber}}"
    return {
        "notification_type": notification_type,
        "intent": "NOTIFICATION_INTENT_WARNING",
        "title": "Disk almost full",
        "message": "92% used on db-1; cleanup job failed twice",
        "source": "bench-producer",
        "idempotency_key": key,
        "correlation_id": key,
        "metadata": {"host": "db-1", "used_pct": 92, "runbook": "https://runbooks/disk"},
    }


@dataclass
class GhzResult:
    ops: int  # calls answered OK
    seconds: float  # ghz's own wall time for the run
    latencies_ms: list[float] = field(default_factory=list)  # of the OK calls
    errors: int = 0
    first_error: str = ""
    cpu_s: float | None = None  # ghz's own CPU (user + system)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def parse(report: dict[str, Any]) -> GhzResult:
    """ghz's ``--format json`` report: every call's status and latency (nanoseconds)."""
    details = report.get("details") or []
    latencies = [d["latency"] / 1e6 for d in details if d.get("status") == "OK"]
    failed = [d for d in details if d.get("status") != "OK"]
    return GhzResult(
        ops=len(latencies),
        seconds=float(report.get("total", 0)) / 1e9,
        latencies_ms=latencies,
        errors=len(failed),
        first_error=(failed[0].get("error") or failed[0].get("status", ""))[:300] if failed else "",
    )


async def run(
    ghz: str,
    target: str,
    protoset: Path,
    request: dict[str, Any],
    *,
    concurrency: int,
    seconds: float | None = None,
    total: int | None = None,
) -> GhzResult:
    """One closed-loop ghz run on one connection: ``concurrency`` workers for
    ``seconds`` (the calls in flight then are waited for, not cut off), or until
    ``total`` calls. ghz honours one bound only: with a duration it ignores the count,
    and ``--max-duration`` cuts in-flight calls off as errors."""
    if (seconds is None) == (total is None):
        raise ValueError("give seconds or total")
    bound = [f"--duration={seconds}s", "--duration-stop=wait"] if seconds else [f"--total={total}"]
    args = [
        ghz, "--insecure", f"--protoset={protoset}", f"--call={METHOD}",
        f"--concurrency={concurrency}", *bound,
        f"--timeout={CALL_TIMEOUT}", f"--data={json.dumps(request)}",
        f"--metadata={json.dumps({'authorization': f'Bearer {API_KEY}'})}",
        "--format=json", target,
    ]  # fmt: skip
    cpu_before = _children_cpu()
    proc = await asyncio.create_subprocess_exec(
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    cpu = _children_cpu() - cpu_before
    if proc.returncode != 0 or not out.strip():
        raise RuntimeError(f"ghz exited {proc.returncode}: {err.decode(errors='replace')[-800:]}")
    result = parse(json.loads(out))
    result.cpu_s = cpu
    return result
