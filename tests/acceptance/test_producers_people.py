"""The producer guide's RecipientService grpcurl block, run verbatim against the
quickstart server: people and a rotation written, GetOnCall answered, deletion refused
while a rotation names the person."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.conftest import files
from tests.support.docs import marked_block
from tests.support.process import ServerProcess
from tests.toolchain.tools import find_tool


@pytest.fixture
def quickstart(tmp_path: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(tmp_path)
    try:
        server.wait_serving()
        yield server
    finally:
        server.stop()


def test_the_people_grpcurl_block_runs(quickstart: ServerProcess, tmp_path: Path) -> None:
    grpcurl = find_tool("grpcurl")
    kept = tmp_path / "out"  # the block's $OUT
    kept.mkdir()
    before = files(quickstart.cwd)
    env = {
        **os.environ,
        "ADDR": quickstart.target,
        "OUT": str(kept),
        "PATH": f"{Path(grpcurl).parent}{os.pathsep}{os.environ['PATH']}",
    }
    result = subprocess.run(
        [
            "bash",
            "-euo",
            "pipefail",
            "-c",
            marked_block("docs/producers.md", "producers-people-grpcurl"),
        ],
        cwd=quickstart.cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    # 20:00Z on 7 December is 21:00 in Berlin: the override (bob) ended at 19:00Z, so
    # the second shift's member is on call until 07:00Z the next morning.
    assert files(quickstart.cwd) == before  # written to $OUT, not here
    oncall = json.loads((kept / "oncall.json").read_text())
    assert oncall["recipientId"] == "bob", oncall
    assert oncall["shiftEndTime"] == "2026-12-08T07:00:00Z", oncall
    assert oncall["nextRecipientId"] == "alice", oncall
    assert '"recipientId": "alice"' in out and '"recipientId": "bob"' in out
    assert "FailedPrecondition" in out and "RECIPIENT_IN_USE" in out, out
