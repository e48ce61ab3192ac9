"""The README's curl walkthrough (JSON over HTTP), run verbatim against the quickstart
server with its HTTP listener on."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.acceptance.conftest import files
from tests.support.docs import marked_block
from tests.support.process import ServerProcess

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_curl_walkthrough(
    http_quickstart: tuple[ServerProcess, int], tmp_path: Path
) -> None:
    assert shutil.which("curl"), "the walkthrough needs curl on PATH"
    _, http_port = http_quickstart
    (tmp_path / "tmp").mkdir()  # where mktemp puts the walkthrough's $OUT
    before = files(tmp_path)
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", marked_block("README.md", "curl-walkthrough")],
        cwd=tmp_path,
        env={
            **os.environ,
            "HTTP": f"http://127.0.0.1:{http_port}",
            "TMPDIR": str(tmp_path / "tmp"),
        },
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
    assert '"state": "NOTIFICATION_STATE_DELIVERED"' in out
    assert '"ackState": "ACK_STATE_ACKED"' in out
    assert '"code": "failed_precondition"' in out and '"reason": "NOT_DEAD_LETTERED"' in out
    assert " HTTP 412" in out
    assert "event: event\nid: " in out and '"kind":"EVENT_KIND_ACKED"' in out
