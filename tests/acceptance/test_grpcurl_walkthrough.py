"""The README's grpcurl walkthrough, run verbatim against the quickstart server."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.docs import marked_block
from tests.support.process import ServerProcess
from tests.toolchain.tools import find_tool

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.fixture
def quickstart(tmp_path: Path) -> Iterator[ServerProcess]:
    """`uns-server` with no configuration at all, in an empty directory."""
    server = ServerProcess(tmp_path)
    try:
        server.wait_serving()
        yield server
    finally:
        server.stop()


def test_readme_grpcurl_walkthrough(quickstart: ServerProcess, tmp_path: Path) -> None:
    grpcurl = find_tool("grpcurl")
    env = {
        **os.environ,
        "ADDR": quickstart.target,
        "PATH": f"{Path(grpcurl).parent}{os.pathsep}{os.environ['PATH']}",
    }
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", marked_block("README.md", "grpcurl-walkthrough")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert '"status": "SERVING"' in out
    assert "uns.v1.NotificationService" in out and "rpc WatchEvents" in out
    assert '"state": "NOTIFICATION_STATE_DELIVERED"' in out
    assert '"ackState": "ACK_STATE_ACKED"' in out
    assert '"kind": "EVENT_KIND_ACKED"' in out  # the watch saw the terminal ack event
    assert "NOT_DEAD_LETTERED" in out and "Replay refused" in out
