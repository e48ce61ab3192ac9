"""No module over 400 lines without a reason (issue 21 item 5).

Every hand-written module of ``uns_server`` and of the Python client ``uns_clients`` is
at most ``MAX_LINES`` long, or its docstring has a line starting ``Size:`` that says
why it reads best whole. Split a module that grows past the limit by concern (see
docs/ARCHITECTURE.md); generated protobuf stubs are not ours to split.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

MAX_LINES = 400
ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (ROOT / "uns_server", ROOT / "uns_clients")


def _generated(path: Path) -> bool:
    return "gen" in path.parts or path.name.endswith(("_pb2.py", "_pb2_grpc.py"))


def oversized(root: Path, max_lines: int = MAX_LINES) -> list[str]:
    """The modules under ``root`` longer than ``max_lines`` whose docstring gives no
    ``Size:`` reason, as ``path (n lines)``."""
    out = []
    for path in sorted(root.rglob("*.py")):
        if _generated(path.relative_to(root)):
            continue
        text = path.read_text(encoding="utf-8")
        lines = len(text.splitlines())
        if lines <= max_lines:
            continue
        docstring = ast.get_docstring(ast.parse(text)) or ""
        if not any(line.startswith("Size:") for line in docstring.splitlines()):
            out.append(f"{path.relative_to(root.parent)} ({lines} lines)")
    return out


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.name)
def test_every_module_is_short_or_says_why(package: Path) -> None:
    assert list(package.rglob("*.py")), package  # the walk found the package
    assert oversized(package) == [], (
        f"split these by concern, or give the reason on a 'Size:' line of the module "
        f"docstring: {oversized(package)}"
    )


def _module(docstring: str, lines: int) -> str:
    body = [f"x{i} = {i}" for i in range(lines - len(docstring.splitlines()) - 1)]
    return "\n".join([f'"""{docstring}', '"""', *body]) + "\n"


@pytest.mark.parametrize(
    ("docstring", "lines", "flagged"),
    [
        ("Short.", 400, False),
        ("Too long, no reason.", 401, True),
        ("Long.\n\nSize: one state machine, read in one sitting.", 401, False),
        ("Long.\n\nThe Size: word mid-line is no reason.", 401, True),
    ],
)
def test_the_rule_flags_a_long_module_without_a_reason(
    tmp_path: Path, docstring: str, lines: int, flagged: bool
) -> None:
    package = tmp_path / "pkg"
    (package / "gen").mkdir(parents=True)
    module = package / "module.py"
    module.write_text(_module(docstring, lines), encoding="utf-8")
    assert len(module.read_text(encoding="utf-8").splitlines()) == lines
    # Generated stubs are never flagged, however long.
    (package / "gen" / "stub.py").write_text(_module("Generated.", 900), encoding="utf-8")
    (package / "api_pb2.py").write_text(_module("Generated.", 900), encoding="utf-8")
    assert oversized(package) == (["pkg/module.py (401 lines)"] if flagged else [])
