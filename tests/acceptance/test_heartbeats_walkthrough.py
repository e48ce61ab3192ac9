"""The README's heartbeats walkthrough (grpcurl and curl), run verbatim against the
quickstart server with its HTTP listener on (issue 44 item 5)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.acceptance.conftest import files
from tests.support.docs import marked_block
from tests.support.process import ServerProcess
from tests.toolchain.tools import find_tool


def test_readme_heartbeats_walkthrough(
    http_quickstart: tuple[ServerProcess, int], tmp_path: Path
) -> None:
    assert shutil.which("curl"), "the walkthrough needs curl on PATH"
    grpcurl = find_tool("grpcurl")
    server, http_port = http_quickstart
    before = files(tmp_path)
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", marked_block("README.md", "heartbeats-walkthrough")],
        cwd=tmp_path,
        env={
            **os.environ,
            "ADDR": server.target,
            "HTTP": f"http://127.0.0.1:{http_port}",
            "PATH": f"{Path(grpcurl).parent}{os.pathsep}{os.environ['PATH']}",
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert files(tmp_path) == before  # it writes nothing where it runs
    # Put (grpcurl), the beat (curl), then Get (grpcurl): up each time, with the beat.
    assert out.count('"state": "HEARTBEAT_STATE_UP"') == 3
    assert out.count('"lastBeatTime"') == 2
