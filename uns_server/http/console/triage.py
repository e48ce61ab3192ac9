"""Dead-letter triage: group failed notifications by type and by error class."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from uns_server.domain.outcomes import DeliveryOutcome

_VARYING = re.compile(r"\b[0-9a-f]{8,}\b|\d+(\.\d+)?")
ERROR_CLASS_MAX_CHARS = 80
NO_ERROR = "(no error recorded)"


def error_class(message: str | None) -> str:
    """A dead letter's error, with what varies between occurrences taken out, so the
    same failure on many notifications falls into one group: the first channel's
    error (``hook: HTTP 503 ...; mail: ...`` -> ``hook: HTTP N ...``), numbers and
    hex ids replaced by ``N``."""
    if not message or not message.strip():
        return NO_ERROR
    first = message.strip().split(";")[0].strip()
    cls = _VARYING.sub("N", first)
    return cls[:ERROR_CLASS_MAX_CHARS]


class Failed(Protocol):
    """What triage reads of a failed notification (a ``FailedSummary`` or a
    ``Notification``)."""

    @property
    def id(self) -> str: ...
    @property
    def notification_type(self) -> str: ...
    @property
    def outcome(self) -> DeliveryOutcome: ...
    @property
    def created_at(self) -> datetime: ...


def row_error(row: Failed) -> str | None:
    return row.outcome.error_message or None


@dataclass
class Group:
    key: str
    ids: list[str] = field(default_factory=list)
    newest: datetime | None = None


def group_by(rows: Iterable[Failed], by: str) -> list[Group]:
    """Groups (largest first) of ``rows`` by ``type`` or by ``error`` class."""
    groups: dict[str, Group] = {}
    for row in rows:
        key = row.notification_type if by == "type" else error_class(row_error(row))
        g = groups.setdefault(key, Group(key))
        g.ids.append(row.id)
        if g.newest is None or row.created_at > g.newest:
            g.newest = row.created_at
    return sorted(groups.values(), key=lambda g: (-len(g.ids), g.key))
