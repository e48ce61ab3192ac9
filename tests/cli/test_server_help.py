"""``uns-server --help`` describes every setting in one line, with its unit.

Run through the CLI (a subprocess, wide terminal so each help is one line). Every field
of ``Settings`` must have a flag whose help says what it does before the environment
variable and default, and a setting whose name carries a unit (``_seconds``, ``_bytes``,
...) names that unit in its help.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import fields

from uns_server.cli.server_help import GROUPS
from uns_server.settings import Settings

UNITS = {
    "_seconds": "seconds",
    "_bytes": "bytes",
    "_minutes": "minutes",
    "_hours": "hours",
    "_per_second": "per second",
}


def help_lines() -> dict[str, str]:
    """Flag -> its help text, from ``uns-server --help``."""
    out = subprocess.run(
        [sys.executable, "-m", "uns_server.cli.server", "--help"],
        env={**os.environ, "COLUMNS": "1000"},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    found: dict[str, str] = {}
    flag = ""
    for line in out.split("options:", 1)[1].splitlines():
        # "  --flag METAVAR   help" or "  --flag METAVAR" with the help on the next lines.
        entry = re.match(
            r"  (--[a-z0-9-]+)(?:, --no-[a-z0-9-]+)?(?: [A-Z0-9_]+)?(?:\s{2,}(.*))?$", line
        )
        if entry:
            flag = entry.group(1)
            found[flag] = entry.group(2) or ""
        elif flag and line.startswith("    "):
            found[flag] = f"{found[flag]} {line.strip()}".strip()
    return found


def test_every_setting_has_a_description_and_its_unit() -> None:
    lines = help_lines()
    for f in fields(Settings):
        flag = "--" + f.name.replace("_", "-")
        assert flag in lines, f"{flag} missing from --help"
        text = lines[flag]
        description, sep, rest = text.partition(f". [UNS_{f.name.upper()}] default: ")
        assert sep and rest, f"{flag}: {text!r}"
        # A description of its own: words, and a unit in brackets at its end.
        assert len(description.split()) >= 3, f"{flag}: {description!r}"
        unit = re.search(r"\(([^()]+)\)$", description)
        assert unit, f"{flag} names no unit: {description!r}"
        for suffix, word in UNITS.items():
            if f.name.endswith(suffix):
                assert word in unit.group(1), f"{flag}: unit {unit.group(1)!r}, wants {word}"


def test_the_help_parser_sees_flags() -> None:
    lines = help_lines()
    assert "seconds" in lines["--lease-seconds"]
    assert lines["--listen"].startswith("gRPC listen address (HOST:PORT)")


def test_settings_are_grouped_by_concern() -> None:
    """Each setting under exactly one heading, the headings in GROUPS' order; a new
    setting needs its place in ``uns_server/cli/server_help.py`` GROUPS."""
    listed = [name for _, names in GROUPS.values() for name in names]
    assert sorted(listed) == sorted(f.name for f in fields(Settings)), (
        "add each setting to exactly one group of GROUPS in uns_server/cli/server_help.py"
    )
    out = subprocess.run(
        [sys.executable, "-m", "uns_server.cli.server", "--help"],
        env={**os.environ, "COLUMNS": "1000"},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    headings = [line[:-1] for line in out.splitlines() if re.fullmatch(r"[^ ].*:", line)]
    assert headings == ["options", *GROUPS], headings
    under = out.split("\nstorage:\n", 1)[1].split("\ngRPC listener and processes:\n", 1)[0]
    assert "--database-url" in under and "--listen " not in under
