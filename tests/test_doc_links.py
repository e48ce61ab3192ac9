"""Every link in README.md and docs/*.md resolves to a file inside the repository.

A clone is all a reader has: a link to a sibling directory (the old ``../shared/SPEC.md``)
or to a file that moved is broken there. Web links are not checked (no network in tests).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# [text](target) and [text](target "title"); images too. Code spans are removed first.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
CODE = re.compile(r"`[^`\n]*`")


def local_targets(doc: Path) -> list[str]:
    text = CODE.sub("", FENCE.sub("", doc.read_text()))
    targets = [m.group(1) for m in LINK.finditer(text)]
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_resolve_inside_the_repository(doc: Path) -> None:
    broken = []
    for target in local_targets(doc):
        path = (doc.parent / target.split("#", 1)[0]).resolve()
        if not path.is_relative_to(ROOT) or not path.exists():
            broken.append(target)
    assert not broken, f"{doc.relative_to(ROOT)}: links that leave the repository or miss: {broken}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_doc_names_the_contract_outside_the_repository(doc: Path) -> None:
    assert "shared/SPEC.md" not in doc.read_text()


def test_the_checker_sees_links() -> None:
    readme = local_targets(ROOT / "README.md")
    assert "docs/CONTRACT.md" in readme
    assert "CONTRACT.md" in local_targets(ROOT / "docs" / "ARCHITECTURE.md")
