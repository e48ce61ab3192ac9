"""The producer guide's JavaScript (fetch) block, run verbatim by node against the
quickstart server with its HTTP listener on."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.docs import marked_block
from tests.support.process import ServerProcess


def test_producer_guide_fetch_example(
    http_quickstart: tuple[ServerProcess, int], tmp_path: Path
) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    server, http_port = http_quickstart
    script = tmp_path / "producer.mjs"
    script.write_text(marked_block("docs/producers.md", "producers-fetch", "js"))
    result = subprocess.run(
        [node, str(script)],
        cwd=tmp_path,
        env={
            **os.environ,
            "UNS_HTTP": f"http://127.0.0.1:{http_port}",
            "UNS_API_KEY": (server.cwd / "uns-dev-key.txt").read_text().strip(),
        },
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "NOTIFICATION_STATE_DELIVERED" in out
    assert "refused 400 INVALID_REQUEST" in out
    assert re.search(r"event \d+ EVENT_KIND_ACKED", out), out
    assert re.search(r"resume after \d+", out), out
