"""A bad --channels-file or --api-keys-file stops ``uns-server`` with exit 2 and a message
that names the file, the line (for a syntax error) and the flag that named the file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def start(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "uns_server.cli.server", "--log-format", "text", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("setting", ["channels_file", "api_keys_file"])
def test_a_syntax_error_names_file_line_and_flag(tmp_path: Path, setting: str) -> None:
    flag = "--" + setting.replace("_", "-")
    bad = tmp_path / "bad.yaml"
    bad.write_text("first:\n  - name: x\n   kind: y\n")  # line 3 is indented wrongly
    done = start(tmp_path, flag, str(bad))
    assert done.returncode == 2, done.stderr
    assert f"{bad}, line 3, column 4: not valid YAML/JSON" in done.stderr
    assert f"given by {flag} (UNS_{setting.upper()})" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("setting", ["channels_file", "api_keys_file"])
def test_a_missing_file_names_the_flag(tmp_path: Path, setting: str) -> None:
    flag = "--" + setting.replace("_", "-")
    done = start(tmp_path, flag, "nowhere.yaml")
    assert done.returncode == 2, done.stderr
    assert f"{flag} (UNS_{setting.upper()}): cannot read nowhere.yaml" in done.stderr
    assert "No such file" in done.stderr


def test_an_invalid_entry_names_the_file_and_flag(tmp_path: Path) -> None:
    keys = tmp_path / "keys.yaml"
    keys.write_text("- principal: billing\n  roles: [producer]\n")  # neither key nor hash
    done = start(tmp_path, "--api-keys-file", str(keys))
    assert done.returncode == 2, done.stderr
    assert f"{keys}: an entry lacks 'key' (given by --api-keys-file" in done.stderr
