"""The producer guide's JavaScript (fetch) block, run verbatim by node against the
quickstart server with its HTTP listener on."""

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

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "producers.md"


def block() -> str:
    text = GUIDE.read_text()
    found = re.search(
        r"<!-- producers-fetch:start.*?-->\s*```js\n(.*?)```\s*<!-- producers-fetch:end",
        text,
        re.S,
    )
    assert found, "docs/producers.md lost its fetch block markers"
    return found.group(1)


@pytest.fixture
def quickstart(tmp_path: Path) -> Iterator[tuple[ServerProcess, int]]:
    http_port = free_port()
    server = ServerProcess(tmp_path, "--http-listen", f"127.0.0.1:{http_port}")
    try:
        server.wait_serving()
        yield server, http_port
    finally:
        server.stop()


def test_producer_guide_fetch_example(
    quickstart: tuple[ServerProcess, int], tmp_path: Path
) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    server, http_port = quickstart
    script = tmp_path / "producer.mjs"
    script.write_text(block())
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
