"""Code blocks that the docs mark for tests to run verbatim."""

from __future__ import annotations

import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def marked_block(doc: str, marker: str, lang: str = "sh") -> str:
    """The ```lang block between ``<!-- marker:start ... -->`` and ``<!-- marker:end``
    in ``doc`` (a path from the repository root)."""
    text = (REPO_ROOT / doc).read_text()
    pattern = rf"<!-- {marker}:start.*?-->\s*```{lang}\n(.*?)```\s*<!-- {marker}:end"
    found = re.search(pattern, text, re.S)
    assert found, f"{doc} lost its {marker} markers"
    return found.group(1)
