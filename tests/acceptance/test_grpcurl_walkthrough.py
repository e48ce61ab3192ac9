"""The README's grpcurl walkthrough, run verbatim against the quickstart server."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.conftest import files
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
        "TMPDIR": str(tmp_path / "tmp"),
        "PATH": f"{Path(grpcurl).parent}{os.pathsep}{os.environ['PATH']}",
    }
    (tmp_path / "tmp").mkdir()  # where mktemp puts the walkthrough's $OUT
    before = files(tmp_path)
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
    # It writes nothing where it runs (the repository root, for a reader): sent.json
    # went to $OUT, a directory of its own.
    assert files(tmp_path) == before
    [kept] = (tmp_path / "tmp").iterdir()
    assert (kept / "sent.json").is_file()
    assert '"status": "SERVING"' in out
    assert "uns.v1.NotificationService" in out and "rpc WatchEvents" in out
    assert '"state": "NOTIFICATION_STATE_DELIVERED"' in out
    # SnoozeNotification answered the snoozed notification, then Acknowledge settled it.
    snoozed = out.index('"ackState": "ACK_STATE_SNOOZED"')
    assert snoozed < out.index('"ackState": "ACK_STATE_ACKED"')
    assert '"snoozeUntilTime": "' in out
    assert '"kind": "EVENT_KIND_SNOOZED"' in out
    assert '"kind": "EVENT_KIND_ACKED"' in out  # the watch saw the terminal ack event
    assert "NOT_DEAD_LETTERED" in out and "Replay refused" in out
