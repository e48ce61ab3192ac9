"""docs/deployment.md's configuration reference lists every setting, correctly."""

from __future__ import annotations

from dataclasses import MISSING, fields
from pathlib import Path

from uns_server.settings import Settings

DOC = Path(__file__).resolve().parents[2] / "docs" / "deployment.md"


def _default_text(value: object) -> str:
    if value is None:
        return "none"
    if value == "":
        return "empty"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def test_every_setting_has_a_row_with_its_variable_flag_and_default() -> None:
    rows = {
        line.split("|")[1].strip(): line
        for line in DOC.read_text().splitlines()
        if line.startswith("| `")
    }
    for f in fields(Settings):
        row = rows.get(f"`{f.name}`")
        assert row is not None, f"docs/deployment.md has no row for {f.name}"
        cells = [c.strip() for c in row.split("|")]
        flag = "--" + f.name.replace("_", "-")
        assert cells[2] == f"`UNS_{f.name.upper()}` / `{flag}`", row
        assert f.default is not MISSING
        assert cells[3].startswith(_default_text(f.default)), (f.name, cells[3])


def test_readme_links_the_guide() -> None:
    readme = (DOC.parents[1] / "README.md").read_text()
    assert "docs/deployment.md" in readme
