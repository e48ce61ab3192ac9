"""The ``uns_admin`` fixture: each test of the two-mode suites runs once per mode of
``uns-admin`` (database, remote) and per dialect (``db_url``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.admin_cli import MODES, AdminCli
from tests.support.server import start_server
from uns_server.services import auth


@pytest.fixture(params=MODES)
async def uns_admin(
    request: pytest.FixtureRequest, db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[AdminCli]:
    # The in-process server must see a revocation at once, whichever mode made it.
    monkeypatch.setattr(auth, "CACHE_SECONDS", 0.0)
    # Escalation steps name channels the server has (SPEC §6: UNKNOWN_CHANNEL).
    channels = tmp_path / "channels.yaml"
    channels.write_text("pagerduty:\n  type: log\nemail:\n  type: log\n")
    server = await start_server(db_url, tmp_path, channels_file=str(channels))
    try:
        yield AdminCli(request.param, server, db_url)
    finally:
        await server.stop()
