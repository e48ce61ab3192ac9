"""Dead-letter triage: group failed notifications by type and by error class."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from uns_server.domain.outcomes import DeliveryOutcome

_VARYING = re.compile(r"\b[0-9a-f]{8,}\b|\d+(\.\d+)?")
# Where the channel's provider is (``connection refused to 10.0.0.7:8443``): the host
# and port of its configured endpoint, the same on every notification of the channel,
# so kept whole: an IPv4 address with or without its port; a bracketed IPv6 address or
# a name whose last label starts with a letter, then a port. Adapters never put a path,
# query or user in an error (``channels._http``), and secrets are masked before a result
# is stored (``channels._redact``): what is left to show is where, not how to get in.
_ENDPOINT = re.compile(
    r"(?<![\w.-])(?:\d{1,3}(?:\.\d{1,3}){3}(?::\d{1,5})?(?!\w|\.\d)"
    r"|(?:\[[0-9A-Fa-f:.]+\]|(?:[A-Za-z0-9-]+\.)*[A-Za-z][A-Za-z0-9-]*):\d{1,5}\b)"
)
ERROR_CLASS_MAX_CHARS = 80
NO_ERROR = "(no error recorded)"


def error_class(message: str | None) -> str:
    """A dead letter's error, with what varies between occurrences taken out, so the
    same failure on many notifications falls into one group: the first channel's
    error (``hook: HTTP 503 ...; mail: ...`` -> ``hook: HTTP N ...``), numbers and
    hex ids replaced by ``N``, except the provider's host and port (``_ENDPOINT``)."""
    if not message or not message.strip():
        return NO_ERROR
    first = message.strip().split(";")[0].strip()
    kept = _ENDPOINT.split(first)  # text between endpoints, with every digit varying
    endpoints = _ENDPOINT.findall(first)
    cls = "".join(
        _VARYING.sub("N", text) + (endpoints[i] if i < len(endpoints) else "")
        for i, text in enumerate(kept)
    )
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
