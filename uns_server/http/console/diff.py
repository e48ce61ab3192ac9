"""Side-by-side diff of two policy revisions, as rows for a template (escaped there)."""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Row:
    tag: str  # equal, replace, delete, insert
    left: str
    right: str


def pretty(document: Any) -> list[str]:
    return json.dumps(document, indent=2, sort_keys=True, default=str).splitlines()


def side_by_side(left: list[str], right: list[str]) -> list[Row]:
    rows: list[Row] = []
    matcher = difflib.SequenceMatcher(a=left, b=right, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        a, b = left[i1:i2], right[j1:j2]
        for k in range(max(len(a), len(b))):
            rows.append(Row(tag, a[k] if k < len(a) else "", b[k] if k < len(b) else ""))
    return rows
