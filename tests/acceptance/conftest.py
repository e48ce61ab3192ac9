"""Fixtures the walkthrough tests share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.postgres import free_port
from tests.support.process import ServerProcess


@pytest.fixture
def http_quickstart(tmp_path: Path) -> Iterator[tuple[ServerProcess, int]]:
    """The quickstart server (no configuration) with its HTTP listener on, and its port."""
    http_port = free_port()
    server = ServerProcess(tmp_path, "--http-listen", f"127.0.0.1:{http_port}")
    try:
        server.wait_serving()
        yield server, http_port
    finally:
        server.stop()
