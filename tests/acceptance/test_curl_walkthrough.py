"""The README's curl walkthrough (JSON over HTTP), run verbatim against the quickstart
server with its HTTP listener on."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.postgres import free_port
from tests.support.process import ServerProcess

README = Path(__file__).resolve().parents[2] / "README.md"


def walkthrough() -> str:
    text = README.read_text()
    block = re.search(
        r"<!-- curl-walkthrough:start.*?-->\s*```sh\n(.*?)```\s*<!-- curl-walkthrough:end",
        text,
        re.S,
    )
    assert block, "README lost its curl walkthrough markers"
    return block.group(1)


@pytest.fixture
def quickstart(tmp_path: Path) -> Iterator[tuple[ServerProcess, int]]:
    http_port = free_port()
    server = ServerProcess(tmp_path, "--http-listen", f"127.0.0.1:{http_port}")
    try:
        server.wait_serving()
        yield server, http_port
    finally:
        server.stop()


def test_readme_curl_walkthrough(quickstart: tuple[ServerProcess, int], tmp_path: Path) -> None:
    assert shutil.which("curl"), "the walkthrough needs curl on PATH"
    _, http_port = quickstart
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", walkthrough()],
        cwd=tmp_path,
        env={**os.environ, "HTTP": f"http://127.0.0.1:{http_port}"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert '"state": "NOTIFICATION_STATE_DELIVERED"' in out
    assert '"ackState": "ACK_STATE_ACKED"' in out
    assert '"code": "failed_precondition"' in out and '"reason": "NOT_DEAD_LETTERED"' in out
    assert " HTTP 412" in out
    assert "event: event\nid: " in out and '"kind":"EVENT_KIND_ACKED"' in out
