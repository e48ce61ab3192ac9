"""docs/deployment.md's people and rotation files and its ``uns-admin`` block, run as
written on a fresh database: the files are accepted, ``oncall`` answers as the comment
says, and what ``rotations show`` prints is put back unchanged (one spelling both ways).

Database mode and SQLite: the commands are the same over a server
(tests/cli/test_admin_modes.py runs both modes).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.admin_cli import admin, ok
from tests.support.docs import marked_block

DOC = "docs/deployment.md"


def uns_admin_on_path(tmp_path: Path) -> str:
    """A ``uns-admin`` that runs this tree's code with the interpreter running the tests."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "uns-admin"
    script.write_text(f'#!/bin/sh\nexec {sys.executable} -m uns_server.cli.admin "$@"\n')
    script.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ['PATH']}"


async def test_the_documented_files_and_commands_work(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'uns.db'}"
    ok(await admin(url, "migrate"))
    work = tmp_path / "work"
    work.mkdir()
    (work / "people.yaml").write_text(marked_block(DOC, "people-yaml", "yaml"))
    (work / "rotation.yaml").write_text(marked_block(DOC, "rotation-yaml", "yaml"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("UNS_")}
    done = await asyncio.to_thread(
        subprocess.run,
        ["bash", "-euo", "pipefail", "-c", marked_block(DOC, "people-admin")],
        cwd=work,
        env={**env, "UNS_DATABASE_URL": url, "PATH": uns_admin_on_path(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    decoder = json.JSONDecoder()
    outputs, rest = [], done.stdout.strip()
    while rest:
        value, end = decoder.raw_decode(rest)
        outputs.append(value)
        rest = rest[end:].strip()
    people, [rotation], oncall, [put_back] = outputs
    assert [p["recipient_id"] for p in people] == ["alice", "bob"]
    assert people[0]["quiet_hours"] == {
        "time_zone": "Europe/Paris",
        "start": "22:00",
        "end": "07:00",
    }
    assert rotation["shift"] == "7d"  # printed as the file spells it
    assert oncall["recipient_id"] == "bob" and oncall["override"] is True
    read_only = ("create_time", "update_time", "updated_by")
    assert {k: v for k, v in put_back.items() if k not in read_only} == {
        k: v for k, v in rotation.items() if k not in read_only
    }
    assert set(os.listdir(work)) == {"people.yaml", "rotation.yaml"}
    # the block writes nothing beside the files it reads


async def test_a_misspelled_field_is_refused_not_dropped(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'uns.db'}"
    ok(await admin(url, "migrate"))
    people = tmp_path / "people.yaml"
    people.write_text(marked_block(DOC, "people-yaml", "yaml"))
    ok(await admin(url, "recipients", "put", "--file", str(people)))
    rotation = tmp_path / "rotation.yaml"
    rotation.write_text(
        marked_block(DOC, "rotation-yaml", "yaml").replace("shift: 7d", "shift_seconds: 604800")
    )
    refused = await admin(url, "rotations", "put", "--file", str(rotation))
    assert refused.code == 2, refused
    assert refused.messages == [
        f"uns-admin: {rotation}: item 0: rotation.shift_seconds: unknown field; a rotation "
        "has rotation_id, members, start_time, shift, time_zone, overrides"
    ], refused
